// Rank 0's notices to every other rank, in the order it sends them, on the control
// communicator: checkpoint calls (checkpoint the prompt in flight when you reach micro-batch
// `cutoff`: pipeline/checkpoint_run.hpp), then, always last, either the graceful stop (the
// first micro-batch that will not run) or the end (rank 0 has walked the whole plan); both
// carry the sequence of the last call, so a rank knows which calls it must still answer. Only rank 0 sees the stop
// signal and decides when to checkpoint. Every other rank keeps a receive for the next notice posted from the start,
// polls it between micro-batches (take, take_checkpoint) and lets a stop interrupt a
// receive-wait (a WaitInterrupt), so no rank waits for a chunk that will never come. One
// message stream from one sender: MPI keeps it in order, so a checkpoint call announced
// before the stop is always seen before it. What the cutoffs mean is the stage loop's affair.
// A stop signal that reaches another rank alone (a node's own agent, a kill aimed at one
// process) is forwarded to rank 0 as a request (request_stop), which rank 0 polls beside its
// own flag (stop_requested_elsewhere): the stop is still rank 0's to announce.
#pragma once

#include <mpi.h>

#include <array>
#include <deque>
#include <optional>

#include "dist/wait_interrupt.hpp"

namespace pf::dist {

// Checkpoint the prompt in flight at micro-batch `cutoff`: its rows [0, tokens).
struct CheckpointCall {
  long long sequence = 0;  // 1, 2, ... within the run's checkpoints
  long long cutoff = 0;
  long long prompt = 0;
  long long tokens = 0;
};

class ControlNotices final : public WaitInterrupt {
 public:
  static constexpr int kAnnouncer = 0;  // the rank of `control_comm` that may announce

  explicit ControlNotices(MPI_Comm control_comm);  // not collective: listeners post their receive
  ~ControlNotices();                               // a listener's receive that got nothing is withdrawn
  ControlNotices(const ControlNotices&) = delete;  // MPI writes into it
  ControlNotices& operator=(const ControlNotices&) = delete;

  // The announcer: the stop or the end at most once, and after it nothing (tiny messages:
  // returns at once). `last_call`: the sequence of the last checkpoint call announced (0: none).
  void announce(long long cutoff, long long last_call = 0);
  void announce_end(long long last_call);
  void announce_checkpoint(const CheckpointCall& call);
  bool announced() const { return announced_; }
  // A listener: the stop's cutoff once it has arrived, and only that once; nullopt otherwise.
  std::optional<long long> take();
  // A listener: the next checkpoint call that arrived, in order; nullopt when none is waiting.
  std::optional<CheckpointCall> take_checkpoint();
  // A listener: once the stop or the end has arrived, the sequence of the last call rank 0
  // announced (every call up to it has arrived too); nullopt before.
  std::optional<long long> last_call();
  // A listener whose own stop signal came: asks rank 0 to stop (once; a tiny message).
  void request_stop();
  // The announcer: whether another rank has asked for the stop (polls; true from then on).
  bool stop_requested_elsewhere();
  // The stop arrived and is not yet taken. A wait it interrupts leaves its receive posted;
  // the caller takes the cutoff and decides.
  bool raised() override;

 private:
  using Message = std::array<long long, 5>;  // kind, then its values
  void send_to_all(const Message& message);
  void receive_arrived();       // moves every notice that has arrived into the fields below
  bool receive_stop_request();  // the announcer: one request that has arrived, if any

  MPI_Comm comm_;
  bool announcer_;
  Message incoming_{};
  MPI_Request listening_ = MPI_REQUEST_NULL;
  std::deque<CheckpointCall> calls_;
  std::optional<long long> stop_, last_call_;
  bool taken_ = false, announced_ = false, ended_ = false;
  bool stop_asked_ = false;  // listener: sent its request; announcer: received one
};

}  // namespace pf::dist
