// See rank_threads.hpp.
#include "compute/cpu/rank_threads.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>

#include "compute/cpu/gemm.hpp"
#include "compute/cpu/thread_pool.hpp"

namespace pf::compute {

RankThreads decide_rank_threads(int requested, MPI_Comm world) {
  RankThreads t;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  t.cpus = sched_getaffinity(0, sizeof(mask), &mask) == 0 ? CPU_COUNT(&mask) : static_cast<int>(online);
  t.cpus = std::max(1, t.cpus);
  t.bound = online > 0 && t.cpus < online;
  MPI_Comm node;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &t.ranks_on_node);
  MPI_Comm_free(&node);
  t.requested = requested > 0;
  if (t.requested)
    t.threads = requested;
  else
    t.threads = t.bound ? t.cpus : std::max(1, t.cpus / t.ranks_on_node);
  return t;
}

void use_rank_threads(const RankThreads& t) {
  cpu::ThreadPool::instance().set_threads(t.threads);
  cpu::set_gemm_threads(t.threads);
}

std::string describe(const RankThreads& t) {
  std::string text = std::to_string(t.threads) + (t.threads == 1 ? " thread" : " threads") + " a rank (";
  if (t.requested) return text + "--threads)";
  text += std::to_string(t.cpus) + (t.cpus == 1 ? " CPU " : " CPUs ");
  if (t.bound) return text + "bound to it by the launcher)";
  return text + "shared by " + std::to_string(t.ranks_on_node) + (t.ranks_on_node == 1 ? " rank" : " ranks") +
         " on this node)";
}

}  // namespace pf::compute
