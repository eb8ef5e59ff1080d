// How many threads each rank's CPU kernels use (attention's pool and OpenBLAS), decided in
// one place. Ranks launched unbound share the node's CPUs evenly; a rank the launcher bound
// (srun --cpu-bind, mpirun --bind-to) uses the CPUs it was given. --threads overrides both.
#pragma once

#include <mpi.h>

#include <string>

namespace pf::compute {

struct RankThreads {
  int threads = 1;
  int cpus = 1;            // in this rank's affinity mask
  int ranks_on_node = 1;   // sharing this node
  bool bound = false;      // the mask is narrower than the node: the launcher placed the rank
  bool requested = false;  // --threads decided
};

// Collective over `world`. requested > 0: that many threads.
RankThreads decide_rank_threads(int requested, MPI_Comm world);
// Starts the threads: the kernels' pool and OpenBLAS' count.
void use_rank_threads(const RankThreads& threads);
// e.g. "2 threads a rank (2 CPUs shared by 1 rank on this node)".
std::string describe(const RankThreads& threads);

}  // namespace pf::compute
