// The threads of one rank's CPU kernels (attention, GEMM slices, row-wise ops): a small pool
// whose idle workers sleep on a condition variable (no spinning), so they never take a core
// from the threads at work or from a neighbour rank. The caller's thread works too: a pool of
// n threads has n - 1 workers.
//
// Ranks that share CPUs lend them (rank_threads.cpp): the pool holds threads for all the CPUs
// it may use, and each run() asks `share` how many it may use now (the CPUs over the sharing
// ranks not waiting). How work is split never depends on it (callers split by threads()), so
// results do not change with what the neighbours are doing, only the speed.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pf::cpu {

class ThreadPool {
 public:
  // The rank's pool (one thread until set_threads).
  static ThreadPool& instance();

  ~ThreadPool();
  void set_threads(int threads);
  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  // How many threads a run() may use now (at least 1, at most threads()); none: all of them.
  // `own`: the rank's own share, past which a run counts as on lent CPUs.
  void set_share(std::function<int()> share, int own = 1);
  // Seconds of run() on more threads than the rank's own share, so far (wall time of those calls).
  double lent_seconds() const { return lent_seconds_; }

  // Calls task(i, thread) for i in [0, tasks), spread over the threads (thread < threads()),
  // in order of i as threads free up; returns when all are done. If a task throws, no further
  // task starts and run() rethrows it once the running ones end. A nested or concurrent call
  // runs its tasks on the calling thread (thread 0) instead.
  void run(int tasks, const std::function<void(int task, int thread)>& task);

 private:
  void work(int thread);
  void take_tasks(int thread);
  void stop_workers();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int, int)>* task_ = nullptr;
  int tasks_ = 0, next_ = 0, busy_ = 0;
  int working_ = 1;  // threads of the current run(): workers at or above it stay asleep
  std::function<int()> share_;
  int own_ = 1;
  double lent_seconds_ = 0;
  uint64_t generation_ = 0;
  bool stopping_ = false;
  std::exception_ptr failure_;  // the first task that threw, rethrown by run()
  std::atomic<bool> running_{false};
};

// Row-wise ops on the rank's threads: fn(begin, end) on one contiguous range of [0, rows) per
// thread (one call on the caller's thread when rows are few).
void parallel_rows(int rows, const std::function<void(int begin, int end)>& fn);

}  // namespace pf::cpu
