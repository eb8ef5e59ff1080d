// What a backend's factory (compute/cpu/cpu_backend.hpp, compute/emulate/emulated_backend.hpp,
// compute/cuda/cuda_backend.hpp) builds for one rank, and the inputs the factories share.
// pipeline/backend_setup.cpp picks the factory from compute::BackendKind; after that only
// StageCompute, the TP reducer and the Transport are seen.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compute/stage_compute.hpp"
#include "dist/cp_ring.hpp"
#include "dist/tp_all_reduce.hpp"
#include "dist/transport.hpp"
#include "kvcache/paged_kv_pool.hpp"
#include "model/weights.hpp"

namespace pf::compute {

// Members are released bottom up: the compute before the reducer and pool it uses, the
// communicators last.
struct StageBackend {
  std::shared_ptr<void> device_context;      // cuda: NCCL communicators
  std::unique_ptr<kv::PagedKvPool> kv_pool;  // cpu backend only
  // The TP all-reduce the compute sums its row-parallel partials with (null when tp == 1 or
  // for the emulator, whose modelled time includes it). The stage loop reads its counters.
  std::unique_ptr<dist::TpAllReduce> all_reduce;
  std::unique_ptr<dist::CpRing> cp_ring;       // cpu and cuda with cp > 1: the stage's CP group
  std::unique_ptr<dist::CpRing> host_cp_ring;  // cuda with cp > 1: the group on host memory (KV rows)
  std::unique_ptr<StageCompute> compute;
  // What this rank's weights loader read, block by block (empty for the emulator): the
  // pieces of the weights' identity (pipeline::agree_on_weights_identity).
  std::vector<model::BlockDigest> weights_digests;
  std::string description;  // e.g. "cpu" or "emulate, analytic:h20 (H20, bf16)"
  std::string detail;       // how it computes, for the run's header (cpu: kernels and threads), or empty
  // The transport for slots of `floats` floats (known once the plan is made).
  std::function<std::unique_ptr<dist::Transport>(size_t floats)> make_transport;
};

// What a stage's KV pool must hold: every prompt (a stage holds one prompt's pages at a
// time, so the longest decides) and, when the run profiles, room for the profile's prefix
// plus chunk (as far as the budget allows; the prompts must fit).
struct KvDemand {
  std::vector<int64_t> prompt_lengths;  // what this rank's pool holds of each prompt (--cp: its share)
  int64_t profile_room_tokens = 0;
  std::vector<int64_t> whole_prompts;  // each prompt's tokens, for the message when one does not fit
};

// This rank's weights (its stage's layers, its TP shard), read when the factory is ready
// for them; with a sink, each layer goes to it as it is read (model::load_stage_weights).
// Collective.
using WeightsLoader = std::function<model::StageWeights(const model::LayerSink&)>;

}  // namespace pf::compute
