// NCCL and host-staged transports of device buffers (see device_transports.hpp).
#include "dist/device_transports.hpp"

#include <string>

#include "dist/wait.hpp"
#include "dist/wait_interrupt.hpp"

namespace pf::dist {
namespace {

bool request_done(MPI_Request* request) {
  int done = 0;
  MPI_CHECK(MPI_Test(request, &done, MPI_STATUS_IGNORE));
  return done != 0;
}

}  // namespace

NcclTransport::NcclTransport(size_t floats_per_slot, const Topology& topology, const NcclComms& comms,
                             cudaStream_t forward)
    : floats_per_slot_(floats_per_slot), topo_(topology), comms_(comms), forward_(forward) {
  CUDA_CHECK(cudaStreamCreateWithFlags(&send_stream_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&recv_stream_, cudaStreamNonBlocking));
}

NcclTransport::~NcclTransport() {
  cudaStreamSynchronize(send_stream_);
  cudaStreamSynchronize(recv_stream_);
  for (auto& slot : slots_)
    for (cudaEvent_t e : {slot->received, slot->computed, slot->sent, slot->released}) cudaEventDestroy(e);
  cudaStreamDestroy(send_stream_);
  cudaStreamDestroy(recv_stream_);
}

int NcclTransport::acquire_slot() {
  if (!free_.empty()) {
    const int slot = free_.back();
    free_.pop_back();
    return slot;
  }
  auto slot = std::make_unique<Slot>();
  slot->buffer = cuda::DeviceArray<float>(floats_per_slot_);
  for (cudaEvent_t* e : {&slot->received, &slot->computed, &slot->sent, &slot->released})
    CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  slots_.push_back(std::move(slot));
  return static_cast<int>(slots_.size()) - 1;
}

void NcclTransport::release_slot(int slot) {
  CUDA_CHECK(cudaEventRecord(slots_[slot]->released, forward_));
  free_.push_back(slot);
}

void NcclTransport::start_recv(int slot, int floats, int tag) {
  Slot& s = *slots_[slot];
  s.expected = floats;
  MPI_CHECK(MPI_Irecv(&s.header_in, 1, MPI_LONG_LONG, topo_.prev_rank, tag, topo_.pipeline_comm, &s.recv_header));
}

bool NcclTransport::wait_recv(int slot, WaitInterrupt* interrupt) {
  Slot& s = *slots_[slot];
  // The header says the previous stage has enqueued its ncclSend of this chunk.
  if (!wait_unless(&s.recv_header, interrupt)) return false;
  if (s.header_in != s.expected)  // both ends walk the same plan: a mismatch is a bug
    throw std::logic_error("NCCL transport: the previous stage announces " + std::to_string(s.header_in) +
                           " floats, the plan says " + std::to_string(s.expected));
  CUDA_CHECK(cudaStreamWaitEvent(recv_stream_, s.released, 0));  // the slot's last forward is done
  NCCL_CHECK(ncclRecv(s.buffer.data(), static_cast<size_t>(s.header_in), ncclFloat, /*peer=*/0, comms_.recv_link,
                      recv_stream_));
  CUDA_CHECK(cudaEventRecord(s.received, recv_stream_));
  CUDA_CHECK(cudaStreamWaitEvent(forward_, s.received, 0));  // compute starts when the data is in
  return true;
}

void NcclTransport::cancel_recv(int slot) {
  Slot& s = *slots_[slot];
  if (s.recv_header == MPI_REQUEST_NULL) return;
  MPI_CHECK(MPI_Cancel(&s.recv_header));
  wait_polling(&s.recv_header);
}

void NcclTransport::start_send(int slot, int floats, int tag) {
  Slot& s = *slots_[slot];
  CUDA_CHECK(cudaEventRecord(s.computed, forward_));
  CUDA_CHECK(cudaStreamWaitEvent(send_stream_, s.computed, 0));  // send once computed
  NCCL_CHECK(ncclSend(s.buffer.data(), static_cast<size_t>(floats), ncclFloat, /*peer=*/1, comms_.send_link,
                      send_stream_));
  CUDA_CHECK(cudaEventRecord(s.sent, send_stream_));
  s.header_out = floats;
  MPI_CHECK(MPI_Isend(&s.header_out, 1, MPI_LONG_LONG, topo_.next_rank, tag, topo_.pipeline_comm, &s.send_header));
}

bool NcclTransport::send_done(int slot) {
  Slot& s = *slots_[slot];
  return cuda::event_done(s.sent) && request_done(&s.send_header);
}

void NcclTransport::finish_send(int slot) {
  Slot& s = *slots_[slot];
  wait_until([&] { return cuda::event_done(s.sent) && request_done(&s.send_header); });
}

StagedTransport::StagedTransport(size_t floats_per_slot, const Topology& topo, cudaStream_t forward)
    : floats_per_slot_(floats_per_slot),
      forward_(forward),
      host_(floats_per_slot, topo.prev_rank, topo.next_rank, topo.pipeline_comm) {}

int StagedTransport::acquire_slot() {
  const int slot = host_.acquire_slot();
  if (slot >= static_cast<int>(device_.size())) {
    device_.resize(slot + 1);
    pending_floats_.resize(slot + 1, 0);
  }
  if (device_[slot].empty()) device_[slot] = cuda::DeviceArray<float>(floats_per_slot_);
  return slot;
}

void StagedTransport::start_recv(int slot, int floats, int tag) {
  pending_floats_[slot] = floats;
  host_.start_recv(slot, floats, tag);
}

bool StagedTransport::wait_recv(int slot, WaitInterrupt* interrupt) {
  if (!host_.wait_recv(slot, interrupt)) return false;
  CUDA_CHECK(cudaMemcpyAsync(device_[slot].data(), host_.slot_data(slot), sizeof(float) * pending_floats_[slot],
                             cudaMemcpyHostToDevice, forward_));
  CUDA_CHECK(cudaStreamSynchronize(forward_));  // the host buffer goes back to MPI after this
  return true;
}

void StagedTransport::start_send(int slot, int floats, int tag) {
  CUDA_CHECK(cudaMemcpyAsync(host_.slot_data(slot), device_[slot].data(), sizeof(float) * floats,
                             cudaMemcpyDeviceToHost, forward_));
  CUDA_CHECK(cudaStreamSynchronize(forward_));
  host_.start_send(slot, floats, tag);
}

}  // namespace pf::dist
