// Transports of device-resident hidden states (cuda backend); see transport.hpp for the
// contract, nccl_comms.hpp for the communicators.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "device/device_array.hpp"
#include "dist/host_transport.hpp"
#include "dist/nccl_comms.hpp"
#include "dist/transport.hpp"

namespace pf::dist {

// ncclSend / ncclRecv on their own streams, ordered against `forward` by events.
class NcclTransport final : public Transport {
 public:
  NcclTransport(size_t floats_per_slot, const Topology& topology, const NcclComms& comms, cudaStream_t forward);
  ~NcclTransport() override;

 private:
  int acquire_slot() override;
  // The forward stream may still be computing on a released slot (the last stage releases
  // right after enqueueing): its next receive waits for that on the device.
  void release_slot(int slot) override;
  float* slot_data(int slot) override { return slots_[slot]->buffer.data(); }
  void start_recv(int slot, int floats, int tag) override;
  bool wait_recv(int slot, WaitInterrupt* interrupt) override;
  void cancel_recv(int slot) override;
  void start_send(int slot, int floats, int tag) override;
  bool send_done(int slot) override;
  void finish_send(int slot) override;

  struct Slot {
    cuda::DeviceArray<float> buffer;
    long long header_in = 0, header_out = 0;  // floats of the chunk (the signal, and a check)
    long long expected = 0;                   // floats the receiver's plan says are coming
    MPI_Request recv_header = MPI_REQUEST_NULL, send_header = MPI_REQUEST_NULL;
    cudaEvent_t received = nullptr, computed = nullptr, sent = nullptr, released = nullptr;
  };
  size_t floats_per_slot_;
  const Topology& topo_;
  NcclComms comms_;
  cudaStream_t forward_, send_stream_ = nullptr, recv_stream_ = nullptr;
  std::vector<std::unique_ptr<Slot>> slots_;  // stable addresses: MPI writes the headers
  std::vector<int> free_;
};

// Device slots staged through host memory and MPI (several ranks may share a GPU).
// Synchronous with the forward stream at each hop: this transport is for tests and
// machines without NCCL peers, not for speed.
class StagedTransport final : public Transport {
 public:
  StagedTransport(size_t floats_per_slot, const Topology& topology, cudaStream_t forward);

 private:
  int acquire_slot() override;
  void release_slot(int slot) override { host_.release_slot(slot); }
  float* slot_data(int slot) override { return device_[slot].data(); }
  void start_recv(int slot, int floats, int tag) override;
  bool wait_recv(int slot, WaitInterrupt* interrupt) override;
  void cancel_recv(int slot) override { host_.cancel_recv(slot); }
  void start_send(int slot, int floats, int tag) override;
  bool send_done(int slot) override { return host_.send_done(slot); }
  void finish_send(int slot) override { host_.finish_send(slot); }

  size_t floats_per_slot_;
  cudaStream_t forward_;
  HostTransport host_;  // slot ids are shared with host_
  std::vector<cuda::DeviceArray<float>> device_;
  std::vector<int> pending_floats_;  // of the receive posted on each slot
};

}  // namespace pf::dist
