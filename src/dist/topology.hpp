// Rank -> (pipeline stage, context-parallel rank, tensor-parallel rank), and the
// communicators built on it. TP innermost, then CP, then PP:
//   rank = (stage * cp + cp_rank) * tp + tp_rank
// so a TP group is a block of consecutive ranks (inside one node under Slurm's block
// distribution), a stage's CP ranks are the next blocks (the same node or its neighbours),
// and PP crosses nodes.
#pragma once

#include <mpi.h>

namespace pf::dist {

struct Topology {
  int world_rank = 0;
  int world_size = 1;
  int pp = 1;
  int tp = 1;
  int cp = 1;
  int stage = 0;
  int tp_rank = 0;
  int cp_rank = 0;
  int prev_rank = -1;                      // same cp_rank, tp_rank on the previous stage, -1 on stage 0
  int next_rank = -1;                      // same cp_rank, tp_rank on the next stage, -1 on the last stage
  MPI_Comm tp_comm = MPI_COMM_NULL;        // this stage's ranks of this cp_rank, ordered by tp_rank
  MPI_Comm cp_comm = MPI_COMM_NULL;        // this stage's ranks of this tp_rank, ordered by cp_rank
  MPI_Comm stage_comm = MPI_COMM_NULL;     // every rank of this stage, in world order
  MPI_Comm pipeline_comm = MPI_COMM_NULL;  // hidden states between neighbouring stages
  MPI_Comm result_comm = MPI_COMM_NULL;    // logits from the last stage to the writer
  MPI_Comm control_comm = MPI_COMM_NULL;   // rank 0's stop notice (graceful stop on SIGTERM)

  bool first_stage() const { return stage == 0; }
  bool last_stage() const { return stage == pp - 1; }
  bool is_writer() const { return world_rank == 0; }
  // The last stage's CP rank 0, whose TP group computes the results: the other CP ranks
  // gather their rows to it (with cp == 1: the whole last stage).
  bool emits_results() const { return last_stage() && cp_rank == 0; }
  int last_stage_leader() const { return (pp - 1) * cp * tp; }  // world rank of (last stage, cp 0, tp 0)
};

// Throws UserError when the world size is not pp * cp * tp. Collective over MPI_COMM_WORLD.
Topology make_topology(int pp, int tp, int cp = 1);
void free_topology(Topology& topology);

}  // namespace pf::dist
