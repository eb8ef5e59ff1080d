// The simulated device (see sim_device.hpp).
#include "runtime_sim/sim_device.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>

#include "host_sim/host_sim.hpp"

namespace pf::sim {

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

SimDevice& SimDevice::get() {
  static SimDevice device;
  return device;
}

namespace {
// The device (and so its launch executor) exists before main: a kernel launched before any
// runtime call is queued too, never run at once.
const bool g_device_ready = (SimDevice::get(), true);
}  // namespace

SimDevice::SimDevice() {
  streams_.push_back(std::make_unique<SimStream>());  // the legacy default stream, id 0
  next_id_ = 1;
  // PF_SIM_DEVICE_MIB: the device's memory (default 16 GiB: larger than the tests need, so
  // that the KV pool is sized by the run's own budget, not by the host's RAM).
  const char* mib = std::getenv("PF_SIM_DEVICE_MIB");
  capacity_ = (mib ? std::strtoull(mib, nullptr, 10) : 16384ull) << 20;
  if (const char* order = std::getenv("PF_SIM_STREAM_ORDER")) {
    const std::string text = order;
    if (text == "late-first") {
      order_ = text;
    } else if (text.rfind("random:", 0) == 0) {
      order_ = "random";
      seed_ = std::strtoull(text.c_str() + 7, nullptr, 10);
    } else {
      throw std::runtime_error("PF_SIM_STREAM_ORDER must be late-first or random:SEED (got \"" + text + "\")");
    }
  }
  // Kernel launches of the host simulator go into the stream they name.
  set_stream_executor([](void* stream, std::function<void()> work) {
    SimDevice& device = SimDevice::get();
    std::lock_guard<std::recursive_mutex> hold(device.lock());
    device.enqueue(device.stream(stream), std::move(work));
  });
}

SimStream* SimDevice::stream(void* handle) {
  return handle ? static_cast<SimStream*>(handle) : streams_.front().get();
}

SimStream* SimDevice::create_stream() {
  streams_.push_back(std::make_unique<SimStream>());
  streams_.back()->id = next_id_++;
  return streams_.back().get();
}

void SimDevice::destroy_stream(SimStream* stream) {
  run_stream(stream);  // cudaStreamDestroy lets pending work finish
  // Kept (emptied) rather than freed: an event recorded on it may still be queried.
  stream->items.clear();
  stream->done = 0;
}

void SimDevice::enqueue(SimStream* stream, std::function<void()> work) {
  stream->items.push_back({std::move(work), nullptr, 0});
}

void SimDevice::enqueue_wait(SimStream* stream, const SimEvent& event) {
  if (!event.stream || event.stream == stream) return;  // unrecorded, or already in order
  stream->items.push_back({{}, event.stream, event.position});
}

void SimDevice::record(SimEvent* event, SimStream* stream) {
  stream->items.push_back({[event] { event->time_ms = now_ms(); }, nullptr, 0});
  event->stream = stream;
  event->position = stream->items.size();
}

void SimDevice::run_until(SimStream* stream, size_t position) {
  while (stream->done < position) {
    SimItem& item = stream->items[stream->done];
    if (item.wait_stream) run_until(item.wait_stream, item.wait_position);
    if (item.work) item.work();
    ++stream->done;
  }
}

void SimDevice::run_event(const SimEvent& event) {
  if (event.stream) run_until(event.stream, event.position);
}

bool SimDevice::event_complete(const SimEvent& event) const {
  return !event.stream || event.stream->done >= event.position;
}

void SimDevice::run_all() {
  if (order_ == "random") {
    std::mt19937_64 random(seed_++);
    for (;;) {
      std::vector<SimStream*> pending;
      for (auto& s : streams_)
        if (s->done < s->items.size()) pending.push_back(s.get());
      if (pending.empty()) return;
      SimStream* s = pending[random() % pending.size()];
      run_until(s, s->done + 1);
    }
  }
  // late-first: the newest stream's whole queue first, then the next newest, ...
  for (size_t i = streams_.size(); i-- > 0;) run_stream(streams_[i].get());
}

void* SimDevice::allocate(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  if (allocated_ + rounded > capacity_) return nullptr;
  void* pointer = std::aligned_alloc(256, rounded);
  if (!pointer) return nullptr;
  // Fresh device memory holds garbage on a GPU: NaN bytes here, so a read of unwritten memory shows.
  std::memset(pointer, 0xff, rounded);
  allocated_ += rounded;
  blocks_.push_back({pointer, rounded});
  return pointer;
}

bool SimDevice::release(void* pointer) {
  const auto it = std::find_if(blocks_.begin(), blocks_.end(), [&](const auto& b) { return b.first == pointer; });
  if (it == blocks_.end()) return false;
  allocated_ -= it->second;
  std::free(it->first);
  blocks_.erase(it);
  return true;
}

}  // namespace pf::sim
