// Building a rank's compute backend: the CPU backend (weights of this rank's layers and TP
// shard, a paged KV pool sized for the longest prompt) or the emulator (per-stage costs from
// an analytic model of some hardware, or from a saved profile). Collective.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compute/stage_compute.hpp"
#include "dist/topology.hpp"
#include "dist/transport.hpp"
#include "kvcache/paged_kv_pool.hpp"
#include "pipeline/rank_setup.hpp"
#include "sim/stage_costs.hpp"

namespace pf::pipeline {

struct BackendRequest {
  std::string backend = "cpu";  // cpu | cuda | emulate
  std::string cost_model;       // emulate: analytic:HARDWARE or a `pipefill profile` JSON
  int page_size = 64;
  int64_t kv_memory_mb = 8192;
  int64_t profile_room_tokens = 0;  // extra KV room when this run profiles (prefix + chunk)
  // cuda only:
  std::string transport = "nccl";   // nccl | mpi
  double kv_memory_fraction = 0.85;
  int max_chunk_tokens = 4096;      // workspace reserved before the KV pool is sized
};

struct StageBackend {
  std::shared_ptr<void> device_context;  // cuda: NCCL communicators (first member: released last)
  std::unique_ptr<kv::PagedKvPool> kv_pool;  // cpu backend only
  std::unique_ptr<compute::StageCompute> compute;
  std::string description;  // e.g. "cpu" or "emulate analytic:h20 (H20)"
  // The transport for slots of `floats` floats (known once the plan is made).
  std::function<std::unique_ptr<dist::Transport>(size_t floats)> make_transport;
};

StageBackend make_stage_backend(const dist::Topology& topology, const RankModel& rank_model,
                                const BackendRequest& request, const std::vector<int64_t>& prompt_lengths);

// Per-stage costs for `cost_model` = analytic:HARDWARE or a profile path (its identity must
// match, the backend it was measured on aside). UserError when unusable.
std::vector<sim::StageCost> stage_costs_for(const std::string& cost_model, const dist::Topology& topology,
                                            const RankModel& rank_model, std::string& description);

}  // namespace pf::pipeline
