// Interruptible waits (see wait_interrupt.hpp).
#include "dist/wait_interrupt.hpp"

#include "dist/wait.hpp"
#include "errors.hpp"

namespace pf::dist {

bool wait_unless(MPI_Request* request, WaitInterrupt* interrupt) {
  if (!interrupt) {
    wait_polling(request);
    return true;
  }
  bool completed = false;
  wait_until([&] {
    int done = 0;
    MPI_CHECK(MPI_Test(request, &done, MPI_STATUS_IGNORE));  // the data first: it wins a tie
    completed = done != 0;
    return completed || interrupt->raised();
  });
  return completed;
}

}  // namespace pf::dist
