// The tensor-parallel all-reduce as a compute backend uses it: the row-parallel GEMMs (o,
// down) leave partial sums that the TP group adds up. The backend's set-up builds one
// (host MPI, NCCL, or staged through host memory) and owns it; the compute calls sum() from
// inside its layer; the stage loop only reads what it did (bytes, host spans). MPI-free:
// the CPU and CUDA computes that hold a pointer to it also run in single-process benchmarks.
#pragma once

#include <cstdint>
#include <vector>

namespace pf::dist {

// A stretch of host time one reduce blocked, in local steady-clock seconds (steady_seconds).
struct HostSpan {
  double start_s = 0, end_s = 0;
};

class TpAllReduce {
 public:
  virtual ~TpAllReduce() = default;
  TpAllReduce(const TpAllReduce&) = delete;
  TpAllReduce& operator=(const TpAllReduce&) = delete;

  // Sums `count` floats in place across the TP group. `data` is memory of the backend's
  // kind (host for cpu, device for cuda). Counts the payload; a reducer that blocks the
  // host also records the span it blocked.
  void sum(float* data, int count);

  // True when sum() returns only once the group has reduced (MPI, staged): its spans are
  // the timeline's all-reduce events. False when it is enqueued on a device stream (NCCL)
  // and the time is inside the backend's compute spans.
  bool blocks_host() const { return blocks_host_; }
  // Payload handed to sum() so far: 4 bytes per float (not the ring's wire bytes).
  int64_t payload_bytes() const { return payload_bytes_; }
  // The spans recorded since the last call, oldest first (none unless blocks_host()).
  std::vector<HostSpan> take_spans();

 protected:
  explicit TpAllReduce(bool blocks_host) : blocks_host_(blocks_host) {}
  virtual void reduce(float* data, int count) = 0;

 private:
  bool blocks_host_;
  int64_t payload_bytes_ = 0;
  std::vector<HostSpan> spans_;
};

}  // namespace pf::dist
