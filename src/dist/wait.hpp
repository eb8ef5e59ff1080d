// Waiting on MPI requests without burning a core, and without hanging forever.
//
// Open MPI's MPI_Wait busy-spins; on an oversubscribed node a spinning rank slowed a
// computing one 3.7x (ENVIRONMENT.md). We poll MPI_Test a few times, then sleep between
// polls, the naps growing from 50 us to 1 ms so that a long wait costs little CPU even with
// 16-32 ranks on 2 cores.
//
// Watchdog: a wait longer than the timeout (--watchdog-timeout) means a peer died or hung.
// The rank prints `error: watchdog: ...` naming what it was waiting for (the innermost
// WaitLabel: stage, micro-batch, peer) and aborts the whole job instead of hanging.
#pragma once

#include <mpi.h>

#include <functional>
#include <string>

namespace pf::dist {

void wait_polling(MPI_Request* request, MPI_Status* status = MPI_STATUS_IGNORE);
// Polls `ready` the same way (naps, watchdog): device events, several requests at once.
void wait_until(const std::function<bool()>& ready);

void set_watchdog_timeout(double seconds);  // 0 turns the watchdog off
double watchdog_timeout();

// Names what the waits inside its scope are for, for the watchdog's message.
class WaitLabel {
 public:
  explicit WaitLabel(std::string text);
  ~WaitLabel();
  WaitLabel(const WaitLabel&) = delete;
  WaitLabel& operator=(const WaitLabel&) = delete;

 private:
  std::string previous_;
};

}  // namespace pf::dist
