// Building a rank's compute backend: the one place that turns compute::BackendKind into a
// backend, by calling its factory (compute/cpu/cpu_backend.hpp, compute/emulate/
// emulated_backend.hpp, compute/cuda/cuda_backend.hpp) with what it needs from the opened
// model: the weights loader, the KV shape, the emulator's stage costs. Collective.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compute/backend_kind.hpp"
#include "compute/stage_backend.hpp"
#include "dist/topology.hpp"
#include "io/safetensors.hpp"
#include "pipeline/rank_setup.hpp"
#include "sched/context_split.hpp"
#include "sched/cost_source.hpp"
#include "sim/stage_costs.hpp"

namespace pf::pipeline {

// Every field is set by the caller from the options (no defaults here to drift from them).
struct BackendRequest {
  compute::BackendKind backend = compute::BackendKind::kCpu;
  sched::CostSource cost_source;  // emulate: analytic:HARDWARE or a `pipefill profile` JSON
  int page_size = 0;
  int64_t kv_memory_mb = 0;               // cpu: the KV pool's budget per rank
  int cpu_threads = 0;                    // cpu: threads a rank; 0: decided by compute::decide_rank_threads
  io::Dtype cpu_dtype = io::Dtype::kF32;  // cpu: --dtype (bf16: weights and KV pool in bf16)
  int64_t profile_room_tokens = 0;        // extra KV room when this run profiles (prefix + chunk)
  // Context parallelism (topology.cp > 1, cpu): the fixed chunk size, which decides each CP
  // rank's share of a prompt's KV, and how the ranks attend.
  int cp_chunk = 0;
  sched::CpAttention cp_attention = sched::CpAttention::kAuto;
  // cuda only:
  std::string transport;  // nccl | mpi
  double kv_memory_fraction = 0;
  int max_chunk_tokens = 0;  // workspace reserved before the KV pool is sized
};

using StageBackend = compute::StageBackend;

StageBackend make_stage_backend(const dist::Topology& topology, const RankModel& rank_model,
                                const BackendRequest& request, const std::vector<int64_t>& prompt_lengths);

// Rank 0, before a run reads weights or opens its output: UserError when some stage's KV
// pool could not hold the longest prompt, asked of the backend's own KV rule where the
// options alone decide it (cpu). The cuda backend's rule needs the device memory left after
// the weights, so it answers at set-up; the emulator holds no KV. With context parallelism a
// rank holds its share of each prompt (chunks of `cp_chunk`).
void check_kv_capacity(compute::BackendKind backend, io::Dtype cpu_dtype, const dist::Topology& topology,
                       const RankModel& rank_model, int page_size, int64_t kv_memory_mb,
                       const std::vector<int64_t>& prompt_lengths, int cp_chunk);

// Collective, before a cpu run or profile reads weights: UserError on every rank when the
// largest forwards of the ranks sharing a node (`tokens` on each: the layers' buffers and KV
// rows, and the LM head's rows over the vocabulary slice on a last stage that `scores` every
// position) would not fit that node's memory (its cgroup limit where lower). A chunk of
// millions of tokens would otherwise grow until the OOM killer ends it. `hint` ends the
// message. Other backends: no check here.
void check_forward_memory(compute::BackendKind backend, const dist::Topology& topology, const RankModel& rank_model,
                          int64_t tokens, bool scores, const std::string& hint);

// Per-stage costs from analytic:HARDWARE or a profile (its identity must match, the backend
// it was measured on aside). UserError when unusable.
// With CP (analytic costs only), each rank's share of a chunk and the ring attending by `cp_mode`.
std::vector<sim::StageCost> stage_costs_for(const sched::CostSource& source, const dist::Topology& topology,
                                            const RankModel& rank_model, std::string& description,
                                            sched::CpAttention cp_mode = sched::CpAttention::kAuto);

}  // namespace pf::pipeline
