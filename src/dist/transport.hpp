// How a stage's hidden states move to the next stage, and where they live. A slot is one
// micro-batch's buffer (host memory for the cpu and emulate backends, device memory for
// cuda); it is received into, computed on in place, then sent on, and it may be reused only
// after its send has finished. The stage loop never sees a bare slot, only three move-only
// handles, one per state a slot can be in:
//
//   RecvTicket  a receive posted into the slot     -> wait(): a ReadySlot; cancel(): back to the pool
//   ReadySlot   data that may be computed on        -> Transport::send: a SendTicket; Transport::release
//   SendTicket  a send that may still read the slot -> commit(): waits, then the slot is back in the pool
//
// So a buffer can be handed out again only through a committed SendTicket (or a cancelled
// receive, or a released ReadySlot). Destroying a handle that still holds its slot is a
// bug and aborts, as an uncommitted PendingSend does (p2p.hpp).
//
//   mpi (host):  MPI_Isend / MPI_Irecv of host buffers (PendingSend / PostedRecv own them).
//   nccl:        device buffers; ncclSend / ncclRecv on a send and a receive stream, ordered
//                against the forward stream by events (no host synchronisation); a tiny MPI
//                header per micro-batch tells the receiver the send is enqueued, so a
//                receive is never enqueued for a chunk a graceful stop cut off.
//   mpi-staged:  device buffers staged through host memory and MPI, so several ranks can
//                share one GPU (NCCL refuses two ranks of a communicator on one device).
#pragma once

#include <optional>

#include "dist/wait_interrupt.hpp"

namespace pf::dist {

class Transport;

namespace detail {

// What the three handles share: a transport, one of its slots, move-only ownership, and
// the loud destructor. While an exception unwinds, a held handle does not abort itself, so
// that it does not hide the exception; the transport's own MPI handles (PendingSend,
// PostedRecv, p2p.hpp) still abort if they are destroyed while MPI may touch their buffer.
class SlotHandle {
 public:
  SlotHandle(SlotHandle&& other) noexcept;
  SlotHandle& operator=(SlotHandle&& other) noexcept;  // aborts if this one still holds a slot
  SlotHandle(const SlotHandle&) = delete;
  SlotHandle& operator=(const SlotHandle&) = delete;

  bool held() const { return owner_ != nullptr; }
  int id() const { return slot_; }  // the slot (stable while held; for checks and tests)

 protected:
  explicit SlotHandle(const char* dropped) : dropped_(dropped) {}
  SlotHandle(Transport* owner, int slot, const char* dropped) : owner_(owner), slot_(slot), dropped_(dropped) {}
  ~SlotHandle();
  Transport& owner() const;  // aborts on an empty handle (a moved-from or finished one)
  int give_up();             // empties the handle, returns its slot

 private:
  Transport* owner_ = nullptr;
  int slot_ = -1;
  const char* dropped_;  // the abort message
};

}  // namespace detail

// One micro-batch's hidden states, in a slot that may be computed on.
class ReadySlot : public detail::SlotHandle {
 public:
  ReadySlot() : SlotHandle(kDropped) {}
  float* data() const;  // host or device memory, as the transport keeps it

 private:
  friend class Transport;
  friend class RecvTicket;
  static constexpr const char* kDropped = "ready slot dropped, neither sent nor released";
  ReadySlot(Transport* owner, int slot) : SlotHandle(owner, slot, kDropped) {}
};

// A receive posted into a slot: MPI (or NCCL) may write into it until it is waited for.
class RecvTicket : public detail::SlotHandle {
 public:
  RecvTicket() : SlotHandle(kDropped) {}
  // Until the data may be computed on (device transports: in stream order).
  ReadySlot wait();
  // The same, unless `interrupt` is raised first: then nullopt, and the receive stays posted.
  std::optional<ReadySlot> wait_unless(WaitInterrupt& interrupt);
  // Its message will never be sent: withdraws the receive and returns the slot to the pool.
  void cancel();

 private:
  friend class Transport;
  static constexpr const char* kDropped = "receive dropped while it may still be written into";
  RecvTicket(Transport* owner, int slot) : SlotHandle(owner, slot, kDropped) {}
};

// A send in flight: the transfer may still read the slot's buffer.
class SendTicket : public detail::SlotHandle {
 public:
  SendTicket() : SlotHandle(kDropped) {}
  bool done();    // commit() would not wait
  void commit();  // waits for the send (never skipped), then returns the slot to the pool

 private:
  friend class Transport;
  static constexpr const char* kDropped = "send dropped without commit";
  SendTicket(Transport* owner, int slot) : SlotHandle(owner, slot, kDropped) {}
};

class Transport {
 public:
  Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;
  virtual ~Transport() = default;  // outlives every handle it gave out

  ReadySlot fresh();                                     // a free slot to fill (stage 0 embeds into it)
  RecvTicket post_recv(int floats, int tag);             // from the previous stage, into a free slot
  SendTicket send(ReadySlot slot, int floats, int tag);  // its first `floats` floats, to the next stage
  void release(ReadySlot slot);                          // a slot not sent on (the last stage) back to the pool

 private:
  friend class ReadySlot;
  friend class RecvTicket;
  friend class SendTicket;

  // What each transport implements, on bare slots; only the handles above call these, so
  // the order post -> wait -> send -> finish -> release cannot be broken from outside.
  virtual int acquire_slot() = 0;  // a free slot (grows the pool)
  virtual void release_slot(int slot) = 0;
  virtual float* slot_data(int slot) = 0;
  virtual void start_recv(int slot, int floats, int tag) = 0;
  // Until the slot's data may be computed on, or until `interrupt` (may be null) is raised
  // first: then false, and the receive stays posted.
  virtual bool wait_recv(int slot, WaitInterrupt* interrupt) = 0;
  virtual void cancel_recv(int slot) = 0;  // its message will never be sent
  virtual void start_send(int slot, int floats, int tag) = 0;
  virtual bool send_done(int slot) = 0;    // the buffer could be reused now
  virtual void finish_send(int slot) = 0;  // waits for that
};

}  // namespace pf::dist
