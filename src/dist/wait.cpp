// wait_polling: MPI_Test a few times, then nap between polls (see wait.hpp).
#include "dist/wait.hpp"

#include <time.h>

#include "errors.hpp"

namespace pf::dist {

void wait_polling(MPI_Request* request, MPI_Status* status) {
  constexpr int kSpinTests = 20;      // short waits (a TP all-reduce) finish while spinning
  const timespec nap{0, 100 * 1000};  // then 100 us naps: a few % of a core while waiting
  for (int i = 0;; ++i) {
    int done = 0;
    MPI_CHECK(MPI_Test(request, &done, status));
    if (done) return;
    if (i >= kSpinTests) nanosleep(&nap, nullptr);
  }
}

}  // namespace pf::dist
