// Point-to-point transfer of hidden states between neighbouring stages, with asynchrony
// visible in the types (after SGLang's P2PWork): a PendingSend owns its payload until
// commit() hands the buffer back, so a buffer cannot be reused while MPI still reads it.
// A PostedRecv likewise owns the buffer MPI is writing into until wait() releases it.
#pragma once

#include <mpi.h>

#include <optional>
#include <vector>

#include "dist/wait_interrupt.hpp"

namespace pf::dist {

using Buffer = std::vector<float>;

class PendingSend {
 public:
  PendingSend() = default;
  // Starts MPI_Isend of payload[0:count) and takes ownership of the payload.
  static PendingSend start(Buffer payload, int count, int dest, int tag, MPI_Comm comm);
  PendingSend(PendingSend&& other) noexcept;
  PendingSend& operator=(PendingSend&& other) noexcept;
  PendingSend(const PendingSend&) = delete;
  PendingSend& operator=(const PendingSend&) = delete;
  // Dropping a send that was never committed is a bug; the destructor aborts loudly.
  ~PendingSend();

  bool active() const { return request_ != MPI_REQUEST_NULL; }
  bool test();      // true once the transfer is done (the handle still owns the buffer)
  Buffer commit();  // waits (without spinning) and hands the buffer back for reuse

 private:
  Buffer payload_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

class PostedRecv {
 public:
  PostedRecv() = default;
  static PostedRecv post(Buffer buffer, int count, int source, int tag, MPI_Comm comm);
  PostedRecv(PostedRecv&& other) noexcept;
  PostedRecv& operator=(PostedRecv&& other) noexcept;
  PostedRecv(const PostedRecv&) = delete;
  PostedRecv& operator=(const PostedRecv&) = delete;
  ~PostedRecv();

  bool active() const { return request_ != MPI_REQUEST_NULL; }
  bool test();    // true once the data has arrived (the handle still owns the buffer)
  Buffer wait();  // waits (without spinning) and hands over the filled buffer
  // Waits for the data unless `interrupt` is raised first: the buffer, or nullopt (the
  // receive stays posted).
  std::optional<Buffer> wait_unless(WaitInterrupt& interrupt);
  void cancel();  // withdraws a receive whose message will never be sent

 private:
  Buffer buffer_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

// MPI tags are only guaranteed up to 32767; micro-batch ids wrap, and MPI's
// non-overtaking order on one (source, comm) keeps wrapped tags unambiguous.
inline int tag_of(long long micro_batch) {
  return static_cast<int>(micro_batch % 32000);
}

}  // namespace pf::dist
