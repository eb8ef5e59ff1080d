// The simulated device behind the CUDA runtime, cuBLASLt and NCCL of tests/gpu/runtime_sim:
// streams are queues of host closures, events are positions in them, and nothing enqueued
// runs until the host forces it (a stream or event synchronize, an event query, a
// synchronous copy, a free). Forcing a stream runs its queue in order; an item that waits on
// an event first runs the other stream up to that event, and nothing else. So work on one
// stream never sees work on another unless an event (or a synchronize) orders them: a
// missing cudaStreamWaitEvent reads stale or unwritten memory, as it may on a GPU, but every
// time. When everything must run (cudaDeviceSynchronize), the streams run in the order of
// PF_SIM_STREAM_ORDER: `late-first` (default: the most recently created stream first, e.g.
// a copy stream before the forward stream), or `random:SEED` (items interleaved at random).
// Used only by the simulated build (tests/gpu/CMakeLists.txt); never in the product binary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace pf::sim {

struct SimStream;

// A point in a stream's queue: done once the stream has run `position` items.
struct SimEvent {
  SimStream* stream = nullptr;  // null: never recorded (complete)
  size_t position = 0;
  double time_ms = 0;  // host time when its record ran (cudaEventElapsedTime)
  bool timing = true;
};

struct SimItem {
  std::function<void()> work;  // may be empty (a pure wait)
  SimStream* wait_stream = nullptr;
  size_t wait_position = 0;
};

struct SimStream {
  int id = 0;  // creation order; 0 is the legacy default stream
  std::deque<SimItem> items;
  size_t done = 0;
};

class SimDevice {
 public:
  static SimDevice& get();

  SimStream* stream(void* handle);  // null handle: the default stream
  SimStream* create_stream();
  void destroy_stream(SimStream* stream);

  void enqueue(SimStream* stream, std::function<void()> work);
  void enqueue_wait(SimStream* stream, const SimEvent& event);
  void record(SimEvent* event, SimStream* stream);

  void run_until(SimStream* stream, size_t position);  // forces the stream's first `position` items
  void run_stream(SimStream* stream) { run_until(stream, stream->items.size()); }
  void run_event(const SimEvent& event);
  void run_all();  // in PF_SIM_STREAM_ORDER
  bool event_complete(const SimEvent& event) const;

  // Device memory: host memory 256-byte aligned, counted against a virtual capacity.
  void* allocate(size_t bytes);
  bool release(void* pointer);
  size_t capacity() const { return capacity_; }
  size_t allocated() const { return allocated_; }

  std::recursive_mutex& lock() { return mutex_; }

 private:
  SimDevice();
  std::recursive_mutex mutex_;  // one host thread at a time drives the device
  std::vector<std::unique_ptr<SimStream>> streams_;
  int next_id_ = 0;
  std::string order_ = "late-first";
  uint64_t seed_ = 0;
  size_t capacity_ = 0;
  size_t allocated_ = 0;
  std::vector<std::pair<void*, size_t>> blocks_;
};

}  // namespace pf::sim
