// The cuda backend's set-up: device per rank, NCCL communicators (or the staged MPI
// transport), weights uploaded as bf16, workspace, then the KV pool sized from the device
// memory left (--kv-memory-fraction); a prompt that cannot fit is a user error before any
// compute. Collective. Built only with the CUDA toolkit.
#pragma once

#include <vector>

#include "pipeline/backend_setup.hpp"

namespace pf::pipeline {

StageBackend make_cuda_backend(const dist::Topology& topology, const RankModel& rank_model,
                               const BackendRequest& request, const std::vector<int64_t>& prompt_lengths);

}  // namespace pf::pipeline
