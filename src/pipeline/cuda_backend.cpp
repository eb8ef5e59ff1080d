// cuda backend set-up (see cuda_backend.hpp).
#include "pipeline/cuda_backend.hpp"

#include <string>

#include "compute/cuda/cuda_stage_compute.hpp"
#include "dist/checked_step.hpp"
#include "dist/device_transports.hpp"
#include "dist/nccl_comms.hpp"
#include "dist/wait.hpp"
#include "kvcache/kv_capacity.hpp"

namespace pf::pipeline {

StageBackend make_cuda_backend(const dist::Topology& topo, const RankModel& m, const BackendRequest& request,
                               const std::vector<int64_t>& lengths) {
  const bool nccl = request.transport == "nccl";
  const model::ModelConfig& config = m.config();
  dist::checked_step(MPI_COMM_WORLD, [&] {
    if (!kernels::attention_supports(config.head_dim, request.page_size))
      throw UserError("--backend cuda needs head_dim 32, 48, 64 or 128 (this model: " + std::to_string(config.head_dim) +
                      ") and --page-size a multiple of 64 (given: " + std::to_string(request.page_size) + ")");
  });
  const int device = dist::select_device(topo, /*allow_shared_device=*/!nccl);

  // Communicators first: NCCL's own buffers come out of the same device memory.
  auto comms = std::make_shared<dist::NcclComms>();
  if (nccl) *comms = dist::make_nccl_comms(topo);

  model::StageWeights host_weights = load_rank_weights(topo, m);
  auto compute = std::make_unique<cuda::CudaStageCompute>(config, m.shard, cuda::DeviceWeights::upload(host_weights),
                                                          request.page_size, request.max_chunk_tokens);
  host_weights = model::StageWeights();  // the host copy is not needed any more

  // KV pool: what the longest prompt needs (and profiling room), within the fraction of
  // the memory left after weights and workspace.
  const kv::KvShape shape = compute->kv_shape();
  const int64_t budget_mb =
      static_cast<int64_t>(request.kv_memory_fraction * cuda::CudaStageCompute::free_device_bytes()) >> 20;
  int pages = 0;
  dist::checked_step(MPI_COMM_WORLD, [&] {
    try {
      pages = kv::pool_pages_for(shape, lengths, budget_mb, topo.stage);
    } catch (const UserError& e) {
      throw UserError(std::string(e.what()) + " (GPU " + std::to_string(device) +
                      ": --kv-memory-fraction of the memory left after weights and workspace)");
    }
    if (request.profile_room_tokens > 0)
      pages = kv::profiling_pages(shape, request.profile_room_tokens, budget_mb, pages);
  });
  compute->allocate_kv(pages);

  StageBackend backend;
  const cudaStream_t forward = compute->forward_stream();
  compute->set_waiter([](const std::function<bool()>& ready) { dist::wait_until(ready); });  // with the watchdog
  if (topo.tp > 1)
    compute->set_all_reduce(nccl ? dist::nccl_all_reduce(comms->tp, forward)
                                 : dist::staged_all_reduce(topo.tp_comm, forward));
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
                        (nccl ? "nccl" : "mpi via host") + ", KV " + std::to_string(pages) + " pages)";
  backend.compute = std::move(compute);
  return backend;
}

}  // namespace pf::pipeline
