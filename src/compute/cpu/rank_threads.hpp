// How many threads each rank's CPU kernels use (the pool of thread_pool.hpp, which also runs
// the GEMMs), decided in one place: the CPUs in the rank's affinity mask, shared evenly with
// the node's ranks whose masks overlap it. So a rank the launcher bound to cores of its own
// (srun --cpu-bind, mpirun --bind-to core, --map-by ...:PE=n) uses them all, and ranks left
// unbound split the node. --threads overrides it.
//
// Ranks that share CPUs lend them: while a sharer waits (a pipeline stage in the bubble, a
// rank whose micro-batch has not arrived), the others run their kernels on its CPUs too. The
// split of the work is fixed by the most threads a rank may use, so results never depend on
// what a neighbour was doing.
#pragma once

#include <mpi.h>

#include <string>

namespace pf::compute {

struct RankThreads {
  int threads = 1;       // its own share of the CPUs (or --threads)
  int most_threads = 1;  // with the CPUs of sharing ranks that wait (dist/node_waiting.hpp)
  bool lending = false;  // sharers and their board: threads up to most_threads as they wait
  int cpus = 1;          // in this rank's affinity mask
  int sharing = 1;       // ranks of this node whose masks overlap it (itself included)
  int ranks_on_node = 1;
  bool requested = false;  // --threads decided
};

// Collective over `world`. requested > 0: that many threads.
RankThreads decide_rank_threads(int requested, MPI_Comm world);
// Starts the pool's threads (OpenBLAS itself stays single-threaded: gemm.hpp).
void use_rank_threads(const RankThreads& threads);
// e.g. "2 threads a rank (2 CPUs shared by 1 rank, 1 rank on this node)".
std::string describe(const RankThreads& threads);

}  // namespace pf::compute
