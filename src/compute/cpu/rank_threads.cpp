// See rank_threads.hpp.
#include "compute/cpu/rank_threads.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "compute/cpu/gemm.hpp"
#include "compute/cpu/thread_pool.hpp"

namespace pf::compute {

RankThreads decide_rank_threads(int requested, MPI_Comm world) {
  RankThreads t;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0)
    for (long cpu = 0; cpu < std::min<long>(sysconf(_SC_NPROCESSORS_ONLN), CPU_SETSIZE); ++cpu) CPU_SET(cpu, &mask);
  t.cpus = std::max(1, CPU_COUNT(&mask));
  // The ranks of this node whose CPUs overlap ours share them: Open MPI binds more than two
  // ranks to a whole socket, and `--bind-to none` in a Slurm cgroup leaves every rank the job's
  // CPUs, so "bound" alone would not mean "ours alone".
  MPI_Comm node;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &t.ranks_on_node);
  std::vector<cpu_set_t> masks(t.ranks_on_node);
  MPI_Allgather(&mask, sizeof(mask), MPI_BYTE, masks.data(), sizeof(mask), MPI_BYTE, node);
  MPI_Comm_free(&node);
  t.sharing = 0;  // itself included below
  for (const cpu_set_t& other : masks) {
    cpu_set_t both;
    CPU_AND(&both, &mask, &other);
    if (CPU_COUNT(&both) > 0) ++t.sharing;
  }
  t.requested = requested > 0;
  t.threads = t.requested ? requested : std::max(1, t.cpus / std::max(1, t.sharing));
  return t;
}

void use_rank_threads(const RankThreads& t) {
  cpu::ThreadPool::instance().set_threads(t.threads);
  cpu::single_threaded_gemm();
}

std::string describe(const RankThreads& t) {
  std::string text = std::to_string(t.threads) + (t.threads == 1 ? " thread" : " threads") + " a rank (";
  if (t.requested) return text + "--threads)";
  return text + std::to_string(t.cpus) + (t.cpus == 1 ? " CPU" : " CPUs") + " shared by " + std::to_string(t.sharing) +
         (t.sharing == 1 ? " rank" : " ranks") + ", " + std::to_string(t.ranks_on_node) +
         (t.ranks_on_node == 1 ? " rank" : " ranks") + " on this node)";
}

}  // namespace pf::compute
