// How a stage's hidden states move to the next stage, and where they live. The stage loop
// only sees small integer slots: a slot is one micro-batch's buffer (host memory for the
// cpu and emulate backends, device memory for cuda) that is received into, computed on in
// place, then sent on; it is reused only after its send has finished ("commit").
//
//   mpi (host):  MPI_Isend / MPI_Irecv of host buffers (PendingSend / PostedRecv own them).
//   nccl:        device buffers; ncclSend / ncclRecv on a send and a receive stream, ordered
//                against the forward stream by events (no host synchronisation); a tiny MPI
//                header per micro-batch tells the receiver the send is enqueued, so a
//                receive is never enqueued for a chunk a graceful stop cut off.
//   mpi-staged:  device buffers staged through host memory and MPI, so several ranks can
//                share one GPU (NCCL refuses two ranks of a communicator on one device).
#pragma once

#include <mpi.h>

namespace pf::dist {

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int acquire() = 0;  // a free slot (grows the pool)
  virtual void release(int slot) = 0;
  virtual float* data(int slot) = 0;  // where compute reads and writes the slot

  virtual void post_recv(int slot, int floats, int tag) = 0;
  // Until the slot's data may be computed on (device transports: in stream order), or until
  // `control` (may be null) completes first: then false, and the receive stays posted.
  virtual bool wait_recv(int slot, MPI_Request* control) = 0;
  virtual void cancel_recv(int slot) = 0;  // its message will never be sent

  virtual void start_send(int slot, int floats, int tag) = 0;
  virtual bool send_done(int slot) = 0;    // the buffer could be reused now
  virtual void finish_send(int slot) = 0;  // waits for that (never skipped)
};

}  // namespace pf::dist
