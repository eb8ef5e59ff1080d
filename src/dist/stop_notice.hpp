// The graceful stop, between ranks. Only rank 0 sees the stop signal; it picks a cutoff
// (the first micro-batch that will not run) and announces it on the control communicator.
// Every other rank keeps a receive for the notice posted from the start, polls it between
// micro-batches (take) and lets it interrupt a receive-wait (a WaitInterrupt), so no rank
// waits for a chunk that will never come. What the cutoff means is the stage loop's affair.
#pragma once

#include <mpi.h>

#include <optional>

#include "dist/wait_interrupt.hpp"

namespace pf::dist {

class StopNotice final : public WaitInterrupt {
 public:
  static constexpr int kAnnouncer = 0;  // the rank of `control_comm` that may announce

  explicit StopNotice(MPI_Comm control_comm);  // not collective: listeners post their receive
  ~StopNotice();                               // a listener's receive that got nothing is withdrawn
  StopNotice(const StopNotice&) = delete;      // MPI writes into it
  StopNotice& operator=(const StopNotice&) = delete;

  // The announcer, at most once: tells every other rank (tiny messages: returns at once).
  void announce(long long cutoff);
  bool announced() const { return announced_; }
  // A listener: the cutoff once it has arrived, and only that once; nullopt otherwise.
  std::optional<long long> take();
  // Arrived and not yet taken. A wait it interrupts leaves its receive posted; the caller
  // takes the cutoff and decides.
  bool raised() override;

 private:
  bool arrived();

  MPI_Comm comm_;
  bool announcer_;
  long long incoming_ = -1;
  MPI_Request listening_ = MPI_REQUEST_NULL;
  bool arrived_ = false, taken_ = false, announced_ = false;
};

}  // namespace pf::dist
