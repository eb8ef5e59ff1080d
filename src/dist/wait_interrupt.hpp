// What a blocking wait for a transfer may also watch. When it is raised the wait returns
// early and leaves the transfer posted, so the caller decides what becomes of it. The
// graceful stop (control_notices.hpp) is one: a receive-wait must not outlast a cutoff that
// says the data will never come.
#pragma once

#include <mpi.h>

namespace pf::dist {

class WaitInterrupt {
 public:
  // Polled between the wait's own tests, so it must be cheap and must not block.
  virtual bool raised() = 0;

 protected:
  ~WaitInterrupt() = default;
};

// Waits (as wait_polling: naps, watchdog) until `request` completes: true; or until
// `interrupt` (may be null) is raised first: false, and the request is still active.
bool wait_unless(MPI_Request* request, WaitInterrupt* interrupt);

}  // namespace pf::dist
