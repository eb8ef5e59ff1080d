// wait_polling: MPI_Test a few times, then nap between polls (see wait.hpp).
#include "dist/wait.hpp"

#include <time.h>

#include <algorithm>

#include "errors.hpp"

namespace pf::dist {

void wait_polling(MPI_Request* request, MPI_Status* status) {
  constexpr int kSpinTests = 20;                // short waits (a TP all-reduce) finish while spinning
  constexpr long kFirstNapNs = 50 * 1000;       // then naps from 50 us ...
  constexpr long kLongestNapNs = 1000 * 1000;   // ... doubling up to 1 ms: a rank that waits long
  long nap_ns = kFirstNapNs;                    // (a bubble, a slow stage) costs ~1 % of a core,
  for (int i = 0;; ++i) {                       // and wakes at most 1 ms late.
    int done = 0;
    MPI_CHECK(MPI_Test(request, &done, status));
    if (done) return;
    if (i < kSpinTests) continue;
    const timespec nap{0, nap_ns};
    nanosleep(&nap, nullptr);
    nap_ns = std::min(2 * nap_ns, kLongestNapNs);
  }
}

}  // namespace pf::dist
