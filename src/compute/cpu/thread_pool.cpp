// See thread_pool.hpp. Tasks are handed out one at a time under the mutex: a task here is a
// block of attention (tens of microseconds at least), so the lock is never the bottleneck.
#include "compute/cpu/thread_pool.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <stdexcept>
#include <utility>

namespace pf::cpu {

ThreadPool& ThreadPool::instance() {
  static ThreadPool pool;
  return pool;
}

ThreadPool::~ThreadPool() {
  stop_workers();
}

void ThreadPool::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
  workers_.clear();
  stopping_ = false;
}

void ThreadPool::set_threads(int threads) {
  if (running_) throw std::logic_error("ThreadPool::set_threads while tasks run");
  if (threads < 1) threads = 1;
  if (threads == this->threads()) return;
  stop_workers();
  for (int t = 1; t < threads; ++t) workers_.emplace_back([this, t] { work(t); });
}

void ThreadPool::set_share(std::function<int()> share, int own) {
  if (running_) throw std::logic_error("ThreadPool::set_share while tasks run");
  share_ = std::move(share);
  own_ = std::max(1, own);
}

void ThreadPool::take_tasks(int thread) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (thread < working_ && next_ < tasks_) {
    const int i = next_++;
    ++busy_;
    lock.unlock();
    std::exception_ptr failure;
    try {
      (*task_)(i, thread);
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    --busy_;
    if (failure) {  // hand out no more tasks; run() rethrows the first failure
      if (!failure_) failure_ = failure;
      next_ = tasks_;
    }
  }
  if (busy_ == 0) done_.notify_all();
}

void ThreadPool::work(int thread) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || (generation_ != seen && thread < working_); });
      if (stopping_) return;
      seen = generation_;
    }
    take_tasks(thread);
  }
}

void ThreadPool::run(int tasks, const std::function<void(int, int)>& task) {
  // A call from inside a task, or from a second thread while the pool is busy (the unit
  // tests run TP ranks as threads of one process), runs on its caller's thread alone.
  if (workers_.empty() || tasks <= 1 || running_.exchange(true)) {
    for (int i = 0; i < tasks; ++i) task(i, 0);
    return;
  }
  const int working = std::clamp(share_ ? share_() : threads(), 1, std::min(threads(), tasks));
  if (working == 1) {  // the others are lent to a neighbour rank: no wake-ups
    struct Release {
      std::atomic<bool>& running;
      ~Release() { running = false; }
    } release{running_};  // (after the tasks, even if one throws: nested calls stay inline)
    for (int i = 0; i < tasks; ++i) task(i, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    task_ = &task;
    tasks_ = tasks;
    next_ = 0;
    working_ = working;
    ++generation_;
  }
  const auto start = std::chrono::steady_clock::now();
  wake_.notify_all();  // workers at or past working_ go back to sleep at once
  take_tasks(0);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return next_ >= tasks_ && busy_ == 0; });
  if (working > own_) lent_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  task_ = nullptr;
  tasks_ = 0;
  std::exception_ptr failure = std::exchange(failure_, nullptr);
  running_ = false;
  if (failure) std::rethrow_exception(failure);
}

void parallel_rows(int rows, const std::function<void(int, int)>& fn) {
  ThreadPool& pool = ThreadPool::instance();
  constexpr int kMinRowsPerThread = 16;  // below this, waking a thread costs more than it saves
  const int parts = std::max(1, std::min(pool.threads(), rows / kMinRowsPerThread));
  if (parts == 1) return fn(0, rows);
  pool.run(parts, [&](int part, int) {
    fn(static_cast<int>(static_cast<int64_t>(rows) * part / parts),
       static_cast<int>(static_cast<int64_t>(rows) * (part + 1) / parts));
  });
}

}  // namespace pf::cpu
