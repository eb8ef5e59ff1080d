// Rank -> (pipeline stage, tensor-parallel rank), and the communicators built on it.
// stage = rank / tp, tp_rank = rank % tp: a TP group is a block of consecutive ranks, so
// under Slurm's block distribution it sits inside one node and PP crosses nodes.
#pragma once

#include <mpi.h>

namespace pf::dist {

struct Topology {
  int world_rank = 0;
  int world_size = 1;
  int pp = 1;
  int tp = 1;
  int stage = 0;
  int tp_rank = 0;
  int prev_rank = -1;                      // same tp_rank on the previous stage, -1 on stage 0
  int next_rank = -1;                      // same tp_rank on the next stage, -1 on the last stage
  MPI_Comm tp_comm = MPI_COMM_NULL;        // the ranks of this stage, ordered by tp_rank
  MPI_Comm pipeline_comm = MPI_COMM_NULL;  // hidden states between neighbouring stages
  MPI_Comm result_comm = MPI_COMM_NULL;    // logits from the last stage to the writer
  MPI_Comm control_comm = MPI_COMM_NULL;   // rank 0's stop notice (graceful stop on SIGTERM)

  bool first_stage() const { return stage == 0; }
  bool last_stage() const { return stage == pp - 1; }
  bool is_writer() const { return world_rank == 0; }
  int last_stage_leader() const { return (pp - 1) * tp; }  // world rank of (last stage, tp 0)
};

// Throws UserError when the world size is not pp * tp. Collective over MPI_COMM_WORLD.
Topology make_topology(int pp, int tp);
void free_topology(Topology& topology);

}  // namespace pf::dist
