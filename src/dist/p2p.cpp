// PendingSend / PostedRecv: MPI_Isend / MPI_Irecv whose completion is deferred, never skipped.
#include "dist/p2p.hpp"

#include <cstdio>
#include <utility>

#include "dist/wait.hpp"
#include "errors.hpp"

namespace pf::dist {

PendingSend PendingSend::start(Buffer payload, int count, int dest, int tag, MPI_Comm comm) {
  PendingSend send;
  send.payload_ = std::move(payload);
  MPI_CHECK(MPI_Isend(send.payload_.data(), count, MPI_FLOAT, dest, tag, comm, &send.request_));
  return send;
}

PendingSend::PendingSend(PendingSend&& other) noexcept
    : payload_(std::move(other.payload_)), request_(std::exchange(other.request_, MPI_REQUEST_NULL)) {}

PendingSend& PendingSend::operator=(PendingSend&& other) noexcept {
  if (this != &other) {
    if (active()) fail_library_call("pipefill", "PendingSend overwritten", "send never committed", __FILE__, __LINE__);
    payload_ = std::move(other.payload_);
    request_ = std::exchange(other.request_, MPI_REQUEST_NULL);
  }
  return *this;
}

PendingSend::~PendingSend() {
  if (active()) fail_library_call("pipefill", "~PendingSend", "send dropped without commit", __FILE__, __LINE__);
}

bool PendingSend::test() {
  if (!active()) return true;
  int done = 0;
  MPI_CHECK(MPI_Test(&request_, &done, MPI_STATUS_IGNORE));
  return done != 0;
}

Buffer PendingSend::commit() {
  if (active()) wait_polling(&request_);
  return std::move(payload_);
}

PostedRecv PostedRecv::post(Buffer buffer, int count, int source, int tag, MPI_Comm comm) {
  PostedRecv recv;
  recv.buffer_ = std::move(buffer);
  if (static_cast<int>(recv.buffer_.size()) < count) recv.buffer_.resize(count);
  MPI_CHECK(MPI_Irecv(recv.buffer_.data(), count, MPI_FLOAT, source, tag, comm, &recv.request_));
  return recv;
}

PostedRecv::PostedRecv(PostedRecv&& other) noexcept
    : buffer_(std::move(other.buffer_)), request_(std::exchange(other.request_, MPI_REQUEST_NULL)) {}

PostedRecv& PostedRecv::operator=(PostedRecv&& other) noexcept {
  if (this != &other) {
    if (active()) fail_library_call("pipefill", "PostedRecv overwritten", "receive never waited", __FILE__, __LINE__);
    buffer_ = std::move(other.buffer_);
    request_ = std::exchange(other.request_, MPI_REQUEST_NULL);
  }
  return *this;
}

PostedRecv::~PostedRecv() {
  if (active())
    fail_library_call("pipefill", "~PostedRecv", "receive dropped while MPI writes into it", __FILE__, __LINE__);
}

bool PostedRecv::test() {
  if (!active()) return true;
  int done = 0;
  MPI_CHECK(MPI_Test(&request_, &done, MPI_STATUS_IGNORE));
  return done != 0;
}

std::optional<Buffer> PostedRecv::wait_unless(WaitInterrupt& interrupt) {
  if (!active() || dist::wait_unless(&request_, &interrupt)) return std::move(buffer_);
  return std::nullopt;
}

void PostedRecv::cancel() {
  if (!active()) return;
  MPI_CHECK(MPI_Cancel(&request_));
  wait_polling(&request_);  // completes the cancellation (or the receive, if it raced in)
}

Buffer PostedRecv::wait() {
  if (active()) wait_polling(&request_);
  return std::move(buffer_);
}

}  // namespace pf::dist
