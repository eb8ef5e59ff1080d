// See rank_threads.hpp.
#include "compute/cpu/rank_threads.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "compute/cpu/gemm.hpp"
#include "compute/cpu/thread_pool.hpp"
#include "dist/node_waiting.hpp"

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
  std::vector<int> sharers;  // itself included
  for (int r = 0; r < t.ranks_on_node; ++r) {
    cpu_set_t both;
    CPU_AND(&both, &mask, &masks[r]);
    if (CPU_COUNT(&both) > 0) sharers.push_back(r);
  }
  t.sharing = static_cast<int>(sharers.size());
  t.lending = dist::open_node_waiting(world, sharers) && t.sharing > 1;
  t.requested = requested > 0;
  const int fair = std::max(1, t.cpus / std::max(1, t.sharing));
  // Ranks sharing CPUs lend them while they wait: each may use up to all of them (or its
  // --threads), as many as the working sharers' split of them allows at each kernel. At most
  // 4x its own share, though: 64 ranks unbound on a socket of 64 CPUs would otherwise hold
  // 4,032 sleeping threads between them (and meet `ulimit -u`).
  constexpr int kMostLent = 4;
  t.most_threads = t.requested ? requested : t.lending ? std::min(t.cpus, kMostLent * fair) : fair;
  t.threads = t.lending ? std::min(t.most_threads, fair) : t.most_threads;
  int world_rank = 0;
  MPI_Comm_rank(world, &world_rank);
  if (t.requested && requested > t.cpus && world_rank == 0)  // (rank 0 speaks for the others)
    std::fprintf(stderr,
                 "warning: --threads %d is more than the %d CPU(s) rank 0 may run on: the threads beyond them take "
                 "turns on those CPUs and slow every kernel (0 chooses for you)\n",
                 requested, t.cpus);
  return t;
}

void use_rank_threads(const RankThreads& t) {
  cpu::ThreadPool& pool = cpu::ThreadPool::instance();
  pool.set_threads(t.most_threads);
  if (t.lending && t.most_threads > 1) {
    const int cpus = t.cpus;
    pool.set_share([cpus] { return cpus / dist::working_sharers(); }, t.threads);
  } else {
    pool.set_share(nullptr);
  }
  cpu::single_threaded_gemm();
}

std::string describe(const RankThreads& t) {
  std::string text = std::to_string(t.threads) + (t.threads == 1 ? " thread" : " threads") + " a rank";
  if (t.most_threads > t.threads)
    text += ", up to " + std::to_string(t.most_threads) + " while the ranks sharing its CPUs wait";
  if (t.requested) return text + " (--threads " + std::to_string(t.most_threads) + ")";
  return text + " (" + std::to_string(t.cpus) + (t.cpus == 1 ? " CPU" : " CPUs") + " shared by " +
         std::to_string(t.sharing) + (t.sharing == 1 ? " rank" : " ranks") + ", " + std::to_string(t.ranks_on_node) +
         (t.ranks_on_node == 1 ? " rank" : " ranks") + " on this node)";
}

}  // namespace pf::compute
