// emulate backend factory (see emulated_backend.hpp).
#include "compute/emulate/emulated_backend.hpp"

#include "compute/emulate/emulated_stage_compute.hpp"
#include "dist/host_transport.hpp"

namespace pf::compute {

StageBackend make_emulated_backend(const dist::Topology& topo, const sim::StageCost& cost, int vocab_shard,
                                    int64_t profile_room_tokens, const std::string& description) {
  auto emulated = std::make_unique<EmulatedStageCompute>(cost, vocab_shard, profile_room_tokens);
  // MPI_Iprobe runs Open MPI's progress engine: posted receives pull their data meanwhile.
  const MPI_Comm comm = topo.pipeline_comm;
  emulated->set_background_progress([comm] {
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, MPI_STATUS_IGNORE);
  });
  StageBackend backend;
  backend.compute = std::move(emulated);
  backend.make_transport = [&topo](size_t floats) {
    return std::make_unique<dist::HostTransport>(floats, topo.prev_rank, topo.next_rank, topo.pipeline_comm);
  };
  backend.description = "emulate, " + description;
  return backend;
}

}  // namespace pf::compute
