// The cpu backend's factory: this rank's weights in host memory, a paged KV pool sized by
// the CPU's KV rule, the host MPI all-reduce when tp > 1, MPI transport of host buffers.
#pragma once

#include <cstdint>

#include "compute/stage_backend.hpp"
#include "dist/topology.hpp"
#include "kvcache/paged_kv_pool.hpp"
#include "model/config.hpp"
#include "model/weights.hpp"
#include "sched/context_split.hpp"

namespace pf::compute {

// The CPU's KV rule: stage `stage`'s pool (layers and shard in `shape`) holds the longest
// prompt within `kv_memory_mb`, plus the profile's room as far as the budget allows.
// Returns the pages to allocate; UserError naming the prompt and the stage when it cannot
// fit. Needs no set-up, so rank 0 asks it for every stage before a run opens its output.
int cpu_kv_pages(const kv::KvShape& shape, int stage, const KvDemand& demand, int64_t kv_memory_mb);

// Collective over MPI_COMM_WORLD (a prompt that does not fit is a UserError on every rank).
// `kv_shape`: this rank's stage. `threads`: --threads (0: compute::decide_rank_threads).
StageBackend make_cpu_backend(const dist::Topology& topology, const model::ModelConfig& config,
                              const model::ShardSpec& shard, const kv::KvShape& kv_shape, int64_t kv_memory_mb,
                              int threads, const KvDemand& demand, const WeightsLoader& load_weights,
                              sched::CpAttention cp_attention = sched::CpAttention::kAuto);

}  // namespace pf::compute
