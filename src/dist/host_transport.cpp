// MPI transport of host buffers (see host_transport.hpp): while a receive or a send holds
// a slot, its buffer lives inside the PostedRecv / PendingSend, not in buffers_.
#include "dist/host_transport.hpp"

namespace pf::dist {

HostTransport::HostTransport(size_t floats_per_slot, int prev_rank, int next_rank, MPI_Comm comm)
    : floats_per_slot_(floats_per_slot), prev_(prev_rank), next_(next_rank), comm_(comm) {}

int HostTransport::acquire_slot() {
  if (!free_.empty()) {
    const int slot = free_.back();
    free_.pop_back();
    return slot;
  }
  buffers_.emplace_back(floats_per_slot_);
  return static_cast<int>(buffers_.size()) - 1;
}

void HostTransport::start_recv(int slot, int floats, int tag) {
  recvs_.emplace(slot, PostedRecv::post(std::move(buffers_[slot]), floats, prev_, tag, comm_));
}

bool HostTransport::wait_recv(int slot, WaitInterrupt* interrupt) {
  PostedRecv& recv = recvs_.at(slot);
  if (interrupt) {
    auto arrived = recv.wait_unless(*interrupt);
    if (!arrived) return false;
    buffers_[slot] = std::move(*arrived);
  } else {
    buffers_[slot] = recv.wait();
  }
  recvs_.erase(slot);
  return true;
}

void HostTransport::cancel_recv(int slot) {
  PostedRecv& recv = recvs_.at(slot);
  recv.cancel();
  buffers_[slot] = recv.wait();  // the (cancelled) receive hands its buffer back
  recvs_.erase(slot);
}

void HostTransport::start_send(int slot, int floats, int tag) {
  sends_.emplace(slot, PendingSend::start(std::move(buffers_[slot]), floats, next_, tag, comm_));
}

void HostTransport::finish_send(int slot) {
  buffers_[slot] = sends_.at(slot).commit();
  sends_.erase(slot);
}

}  // namespace pf::dist
