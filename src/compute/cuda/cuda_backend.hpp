// The cuda backend's factory: a device per rank, NCCL communicators (or the staged MPI
// transport), the TP reducer, weights uploaded as bf16, workspace, then the KV pool sized
// by the GPU's KV rule from the device memory left. Collective; any rank's UserError ends
// every rank. Built only with the CUDA toolkit.
#pragma once

#include <cstdint>
#include <string>

#include "compute/stage_backend.hpp"
#include "dist/topology.hpp"
#include "kvcache/paged_kv_pool.hpp"
#include "model/config.hpp"
#include "model/weights.hpp"
#include "sched/context_split.hpp"

namespace pf::cuda {

struct CudaBackendRequest {
  std::string transport;  // "nccl", or "mpi": staged through host memory
  int page_size = 0;
  double kv_memory_fraction = 0;                                // of the device memory left after weights and workspace
  int max_chunk_tokens = 0;                                     // workspace reserved before the KV pool is sized
  sched::CpAttention cp_attention = sched::CpAttention::kAuto;  // --cp-attention
};

// The GPU's KV rule: the pool holds the longest prompt (plus the profile's room as far as
// it goes) within `kv_memory_fraction` of the device memory free now, i.e. once weights
// and workspace are allocated; only the set-up can ask it. Returns the pages to allocate;
// UserError naming the prompt, the stage and the GPU when it cannot fit.
int cuda_kv_pages(const kv::KvShape& shape, int stage, const compute::KvDemand& demand, double kv_memory_fraction,
                  int device);

compute::StageBackend make_cuda_backend(const dist::Topology& topology, const model::ModelConfig& config,
                                        const model::ShardSpec& shard, const CudaBackendRequest& request,
                                        const compute::KvDemand& demand, const compute::WeightsLoader& load_weights);

}  // namespace pf::cuda
