// cuda backend factory (see cuda_backend.hpp).
#include "compute/cuda/cuda_backend.hpp"

#include <algorithm>
#include <string>

#include "compute/cpu/rank_threads.hpp"
#include "compute/cuda/cuda_stage_compute.hpp"
#include "device/cuda_check.hpp"
#include "dist/checked_step.hpp"
#include "dist/device_all_reduce.hpp"
#include "dist/device_cp_ring.hpp"
#include "dist/device_transports.hpp"
#include "dist/nccl_comms.hpp"
#include "dist/wait.hpp"
#include "errors.hpp"
#include "kvcache/kv_capacity.hpp"

namespace pf::cuda {

int cuda_kv_pages(const kv::KvShape& shape, int stage, const compute::KvDemand& demand, double kv_memory_fraction,
                  int device) {
  const int64_t budget_mb = static_cast<int64_t>(kv_memory_fraction * CudaStageCompute::free_device_bytes()) >> 20;
  int pages = 0;
  try {
    pages = kv::pool_pages_for(shape, demand.prompt_lengths, budget_mb, stage, demand.whole_prompts);
  } catch (const UserError& e) {
    throw UserError(std::string(e.what()) + " (GPU " + std::to_string(device) +
                    ": --kv-memory-fraction of the memory left after weights and workspace)");
  }
  if (demand.profile_room_tokens > 0) pages = kv::profiling_pages(shape, demand.profile_room_tokens, budget_mb, pages);
  return pages;
}

namespace {

// The MLA kernels' blocks opt in to more than 48 KiB of shared memory, which a GPU allows up
// to its sharedMemPerBlockOptin (99 KiB on sm_86 and sm_89): checked here, on the device the
// rank got, so that a model whose latent rows need more is an error at set-up, not a failed
// launch in its first layer.
void require_shared_memory(const model::ModelConfig& config, const dist::Topology& topo, int device) {
  if (!config.is_mla()) return;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  const size_t limit = prop.sharedMemPerBlockOptin;
  const int width = config.mla.latent_width(), values = config.mla.kv_lora_rank;
  const auto require = [&](const std::string& what, size_t bytes, const char* way_out) {
    if (bytes <= limit) return;
    throw UserError("--backend cuda: " + what + " on this model's latent rows (" + std::to_string(width) + " wide, " +
                    std::to_string(values) + " value columns) takes " + std::to_string(bytes / 1024) +
                    " KiB of shared memory a block; GPU " + std::to_string(device) + " (" + prop.name + ", sm_" +
                    std::to_string(prop.major) + std::to_string(prop.minor) + ") allows " +
                    std::to_string(limit / 1024) + " KiB: " + way_out);
  };
  require("latent attention", kernels::latent_attention_shared_bytes(width, values), "use --backend cpu");
  if (topo.cp > 1)
    require("--cp's partial attention", kernels::partial_attention_shared_bytes(width, values),
            "use --backend cpu, or leave out --cp");
}

}  // namespace

compute::StageBackend make_cuda_backend(const dist::Topology& topo, const model::ModelConfig& config,
                                        const model::ShardSpec& shard, const CudaBackendRequest& request,
                                        const compute::KvDemand& demand, const compute::WeightsLoader& load_weights) {
  const bool nccl = request.transport == "nccl";
  dist::checked_step(MPI_COMM_WORLD, [&] {
    // MLA's attention kernel reads the latent rows at any page size and width up to its limit.
    // (--save-kv / --kv-store with MLA never reach here: run_inputs.cpp refuses them for MLA
    // on any backend.)
    if (config.is_mla() && config.mla.latent_width() > kernels::latent_attention_max_width())
      throw UserError("--backend cuda runs latent attention on rows of kv_lora_rank + qk_rope_head_dim up to " +
                      std::to_string(kernels::latent_attention_max_width()) +
                      " wide (this model: " + std::to_string(config.mla.latent_width()) + "): use --backend cpu");
    if (!config.is_mla() && !kernels::attention_supports(config.head_dim, request.page_size))
      throw UserError("--backend cuda needs head_dim " + std::string(kernels::kAttentionHeadDims) +
                      " (this model: " + std::to_string(config.head_dim) + ") and --page-size a multiple of " +
                      std::to_string(kernels::kAttentionKeyTile) + " (given: " + std::to_string(request.page_size) +
                      ")");
    if (config.is_mla() && topo.cp > 1 &&
        !kernels::partial_attention_fits(config.mla.latent_width(), config.mla.kv_lora_rank))
      throw UserError("--cp on --backend cuda attends latent rows " + std::to_string(config.mla.latent_width()) +
                      " wide with " + std::to_string(config.mla.kv_lora_rank) +
                      " value columns, more than its partial kernel's shared memory holds: use --backend cpu, or "
                      "leave out --cp");
    const model::MoeConfig& moe = config.moe;
    if (config.is_moe() && !kernels::router_supports(moe.experts, moe.experts_per_token, moe.groups))
      throw UserError("--backend cuda's router holds each token's " + std::to_string(moe.experts) +
                      " expert scores in shared memory, too many for it: use --backend cpu");
  });
  const int device = dist::select_device(topo, /*allow_shared_device=*/!nccl);
  dist::checked_step(MPI_COMM_WORLD, [&] { require_shared_memory(config, topo, device); });

  // Communicators first: NCCL's own buffers come out of the same device memory.
  auto comms = std::make_shared<dist::NcclComms>();
  if (nccl) *comms = dist::make_nccl_comms(topo);

  compute::StageBackend backend;
  // The TP reducer enqueues on the forward stream, so the stream comes first; the compute
  // owns it from then on.
  const cudaStream_t forward = CudaStageCompute::create_forward_stream();
  if (topo.tp > 1) {
    if (nccl)
      backend.all_reduce = std::make_unique<dist::NcclAllReduce>(comms->tp, forward);
    else
      backend.all_reduce = std::make_unique<dist::StagedAllReduce>(topo.tp_comm, forward);
  }
  if (topo.cp > 1) {  // the ring attention's exchanges, on the forward stream too
    if (nccl)
      backend.cp_ring = std::make_unique<dist::NcclCpRing>(comms->cp, topo.cp, topo.cp_rank, forward);
    else
      backend.cp_ring = std::make_unique<dist::StagedCpRing>(topo.cp_comm, topo.cp, topo.cp_rank, forward);
    backend.host_cp_ring = std::make_unique<dist::HostCpRing>(topo.cp_comm);
  }
  // The rank's CPU threads (its cores, shared with the node's other ranks: rank_threads.hpp)
  // read and convert the weights. Each layer goes to the device as soon as it is read: the
  // host holds one layer's float32 copy at a time, never the stage's (8B: 0.9 GB, not 28 GB).
  const compute::RankThreads load_threads = compute::decide_rank_threads(0, MPI_COMM_WORLD);
  compute::use_rank_threads(load_threads);
  DeviceWeights device_weights;
  device_weights.upload_ends(load_weights(
      [&](model::LayerWeights&& layer) { device_weights.layers.push_back(DeviceWeights::upload_layer(layer)); }));
  auto compute = std::make_unique<CudaStageCompute>(
      config, shard, std::move(device_weights), request.page_size, request.max_chunk_tokens, forward,
      backend.all_reduce.get(), backend.cp_ring.get(), backend.host_cp_ring.get(), request.cp_attention);

  // The CP ring's buffers first: the KV pool is sized from the memory they leave. With CP the
  // demand's lengths are already a rank's rows of each prompt (backend_setup.cpp).
  int64_t shard_rows = demand.profile_room_tokens;
  for (int64_t rows : demand.prompt_lengths) shard_rows = std::max(shard_rows, rows);
  int pages = 0;
  dist::checked_step(MPI_COMM_WORLD, [&] {
    compute->reserve_cp_ring(shard_rows, request.max_chunk_tokens);
    pages = cuda_kv_pages(compute->kv_shape(), topo.stage, demand, request.kv_memory_fraction, device);
  });
  compute->allocate_kv(pages);

  compute->set_waiter([](const std::function<bool()>& ready) { dist::wait_until(ready); });  // with the watchdog
  if (nccl) {
    backend.make_transport = [&topo, comms, forward](size_t floats) -> std::unique_ptr<dist::Transport> {
      return std::make_unique<dist::NcclTransport>(floats, topo, *comms, forward);
    };
  } else {
    backend.make_transport = [&topo, forward](size_t floats) -> std::unique_ptr<dist::Transport> {
      return std::make_unique<dist::StagedTransport>(floats, topo, forward);
    };
  }
  backend.device_context = std::shared_ptr<void>(comms.get(), [comms](void*) { dist::destroy_nccl_comms(*comms); });
  backend.description = std::string("cuda (GPU ") + std::to_string(device) + ", bf16, transport " +
                        (nccl ? "nccl" : "mpi via host") + ", KV " + std::to_string(pages) +
                        " pages, weights read on " + std::to_string(load_threads.threads) +
                        (load_threads.threads == 1 ? " thread)" : " threads)");
  backend.compute = std::move(compute);
  return backend;
}

}  // namespace pf::cuda
