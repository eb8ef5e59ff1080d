// Backend construction (see backend_setup.hpp).
#include "pipeline/backend_setup.hpp"

#include <algorithm>

#include "compute/emulate/emulated_stage_compute.hpp"
#include "compute/stage_forward.hpp"
#include "dist/checked_step.hpp"
#include "dist/host_transport.hpp"
#include "kvcache/kv_capacity.hpp"
#ifdef PIPEFILL_HAVE_CUDA
#include "pipeline/cuda_backend.hpp"
#endif

namespace pf::pipeline {

std::vector<sim::StageCost> stage_costs_for(const std::string& cost_model, const dist::Topology& topo,
                                            const RankModel& m, std::string& description) {
  const std::string prefix = "analytic:";
  if (cost_model.rfind(prefix, 0) == 0) {
    const sim::HardwareSpec hw = sim::load_hardware(cost_model.substr(prefix.size()));
    description = cost_model + " (" + hw.name + (m.shape.fp8 ? ", fp8 matmuls" : ", bf16") + ")";
    return sim::analytic_stage_costs(m.shape, hw, m.partition, topo.tp, m.shape.fp8);
  }
  const sched::CostProfile profile = sched::load_cost_profile(cost_model);
  nlohmann::json identity = placement_identity(topo, m, "");
  identity.erase("backend");  // the profile was measured on the backend being emulated
  sched::check_profile_matches(profile, identity, cost_model);
  description = "profile " + cost_model;
  return sim::profiled_stage_costs(profile, topo.pp);
}

StageBackend make_stage_backend(const dist::Topology& topo, const RankModel& m, const BackendRequest& request,
                                const std::vector<int64_t>& lengths) {
#ifdef PIPEFILL_HAVE_CUDA
  if (request.backend == "cuda") return make_cuda_backend(topo, m, request, lengths);
#endif
  StageBackend backend;
  backend.make_transport = [&topo](size_t floats) {
    return std::make_unique<dist::HostTransport>(floats, topo.prev_rank, topo.next_rank, topo.pipeline_comm);
  };
  if (request.backend == "emulate") {
    std::vector<sim::StageCost> costs;
    dist::checked_step(MPI_COMM_WORLD, [&] { costs = stage_costs_for(request.cost_model, topo, m, backend.description); });
    // Bytes on the wire: the emulated hardware's activations (bf16 unless it says otherwise).
    const int activation_bytes = request.cost_model.rfind("analytic:", 0) == 0
                                     ? sim::load_hardware(request.cost_model.substr(9)).activation_bytes
                                     : 2;
    auto emulated = std::make_unique<compute::EmulatedStageCompute>(
        costs[topo.stage], m.shape.hidden_size, activation_bytes, m.shard.vocab_count, request.profile_room_tokens);
    // MPI_Iprobe runs Open MPI's progress engine: posted receives pull their data meanwhile.
    const MPI_Comm comm = topo.pipeline_comm;
    emulated->set_background_progress([comm] {
      int flag = 0;
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, MPI_STATUS_IGNORE);
    });
    backend.compute = std::move(emulated);
    backend.description = "emulate, " + backend.description;
    return backend;
  }
  model::StageWeights weights = load_rank_weights(topo, m);
  const kv::KvShape shape = m.kv_shape(topo.stage, request.page_size);
  int pages = kv::pool_pages_for(shape, lengths, request.kv_memory_mb, topo.stage);
  if (request.profile_room_tokens > 0)
    pages = kv::profiling_pages(shape, request.profile_room_tokens, request.kv_memory_mb, pages);
  backend.kv_pool = std::make_unique<kv::PagedKvPool>(shape, pages);
  backend.compute = std::make_unique<compute::CpuStageCompute>(m.config(), m.shard, std::move(weights), *backend.kv_pool);
  backend.description = "cpu";
  return backend;
}

}  // namespace pf::pipeline
