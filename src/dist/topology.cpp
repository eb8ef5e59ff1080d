// Communicator construction. Pipeline traffic and results get their own duplicates of
// MPI_COMM_WORLD so their tags can never match control messages.
#include "dist/topology.hpp"

#include <cstdint>
#include <string>

#include "errors.hpp"

namespace pf::dist {

Topology make_topology(int pp, int tp, int cp) {
  Topology t;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &t.world_rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &t.world_size));
  if (pp < 1 || tp < 1 || cp < 1) throw UserError("--pp, --tp and --cp must be at least 1");
  // In 64 bits: an int product wraps (--pp 3 --cp 1431655766 "needed" 2 ranks).
  const int64_t needed = int64_t{pp} * cp * tp;
  if (t.world_size != needed) {
    const std::string layout = "--pp " + std::to_string(pp) + (cp > 1 ? " x --cp " + std::to_string(cp) : "") +
                               " x --tp " + std::to_string(tp);
    throw UserError("world size is " + std::to_string(t.world_size) + " ranks but " + layout + " needs " +
                    std::to_string(needed) + " (launch with mpirun -n " + std::to_string(needed) + ")");
  }
  t.pp = pp;
  t.tp = tp;
  t.cp = cp;
  t.stage = t.world_rank / (cp * tp);
  t.cp_rank = t.world_rank / tp % cp;
  t.tp_rank = t.world_rank % tp;
  t.prev_rank = t.first_stage() ? -1 : t.world_rank - cp * tp;
  t.next_rank = t.last_stage() ? -1 : t.world_rank + cp * tp;
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, t.stage * cp + t.cp_rank, t.tp_rank, &t.tp_comm));
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, t.stage * tp + t.tp_rank, t.cp_rank, &t.cp_comm));
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, t.stage, t.world_rank, &t.stage_comm));
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &t.pipeline_comm));
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &t.result_comm));
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &t.control_comm));
  return t;
}

void free_topology(Topology& t) {
  for (MPI_Comm* comm : {&t.tp_comm, &t.cp_comm, &t.stage_comm, &t.pipeline_comm, &t.result_comm, &t.control_comm})
    if (*comm != MPI_COMM_NULL) MPI_Comm_free(comm);
}

}  // namespace pf::dist
