// The rank's thread pool: every task runs once, on a thread index below threads(); nested and
// concurrent calls run inline; a throwing task stops the rest and its exception reaches the
// caller, after which the pool still works.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "compute/cpu/thread_pool.hpp"

using namespace pf;

namespace {

struct PoolOf {  // the singleton at `threads` for one test, back to 1 after
  explicit PoolOf(int threads) { cpu::ThreadPool::instance().set_threads(threads); }
  ~PoolOf() { cpu::ThreadPool::instance().set_threads(1); }
  cpu::ThreadPool& pool() { return cpu::ThreadPool::instance(); }
};

}  // namespace

TEST(ThreadPool, EveryTaskRunsOnceOnAValidThread) {
  PoolOf p(3);
  for (int tasks : {0, 1, 2, 7, 100}) {
    std::vector<std::atomic<int>> runs(tasks);
    std::atomic<int> bad_thread{0};
    p.pool().run(tasks, [&](int i, int thread) {
      runs[i]++;
      if (thread < 0 || thread >= 3) bad_thread++;
    });
    for (int i = 0; i < tasks; ++i) EXPECT_EQ(runs[i], 1) << tasks << " tasks, task " << i;
    EXPECT_EQ(bad_thread, 0);
  }
}

TEST(ThreadPool, NestedAndConcurrentCallsRunInline) {
  PoolOf p(2);
  std::atomic<int> inner{0};
  p.pool().run(4, [&](int, int) { p.pool().run(3, [&](int, int thread) { inner += thread == 0 ? 1 : 100; }); });
  EXPECT_EQ(inner, 12);
  std::atomic<int> total{0};
  std::thread other([&] {
    for (int k = 0; k < 50; ++k) p.pool().run(5, [&](int, int) { total++; });
  });
  for (int k = 0; k < 50; ++k) p.pool().run(5, [&](int, int) { total++; });
  other.join();
  EXPECT_EQ(total, 500);
}

TEST(ThreadPool, AThrowingTaskReachesTheCallerAndThePoolGoesOn) {
  PoolOf p(2);
  std::atomic<int> ran{0};
  EXPECT_THROW(p.pool().run(50,
                            [&](int i, int) {
                              ran++;
                              if (i == 0) throw std::runtime_error("task 0");
                              std::this_thread::sleep_for(std::chrono::milliseconds(2));
                            }),
               std::runtime_error);
  EXPECT_LT(ran, 50);  // no task starts after the failure is seen (those running finish)
  std::atomic<int> after{0};
  p.pool().run(10, [&](int, int) { after++; });
  EXPECT_EQ(after, 10);
}

TEST(ThreadPool, ParallelRowsCoversEveryRowOnce) {
  PoolOf p(3);
  for (int rows : {0, 1, 15, 16, 47, 48, 1000}) {
    std::vector<int> seen(rows, 0);
    cpu::parallel_rows(rows, [&](int begin, int end) {
      for (int r = begin; r < end; ++r) seen[r]++;
    });
    for (int r = 0; r < rows; ++r) EXPECT_EQ(seen[r], 1) << rows << " rows, row " << r;
  }
}

TEST(ThreadPool, RunsOnAsManyThreadsAsItsShareAllows) {
  PoolOf p(3);
  for (int share : {1, 2, 3, 7}) {
    p.pool().set_share([share] { return share; });
    std::vector<std::atomic<int>> runs(40);
    std::atomic<int> above_share{0};
    p.pool().run(40, [&](int i, int thread) {
      runs[i]++;
      if (thread >= std::min(share, 3)) above_share++;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    });
    for (int i = 0; i < 40; ++i) EXPECT_EQ(runs[i], 1) << "share " << share << ", task " << i;
    EXPECT_EQ(above_share, 0) << "share " << share;
  }
  // And it does use them: a share of 2 puts two tasks at work together (each waits for the
  // other), after a run on one thread (the share going down and back up).
  for (int share : {1, 2}) {
    p.pool().set_share([share] { return share; });
    std::atomic<int> arrived{0}, together{0};
    p.pool().run(2, [&](int, int) {
      ++arrived;
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(share == 1 ? 0 : 10);
      while (arrived < 2 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
      if (arrived == 2) ++together;
    });
    if (share == 2) {
      EXPECT_EQ(together, 2) << "a share of 2 ran the tasks one after the other";
    }
  }
  p.pool().set_share(nullptr);
}
