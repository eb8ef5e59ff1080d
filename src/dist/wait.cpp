// wait_polling with a watchdog (see wait.hpp).
#include "dist/wait.hpp"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "dist/node_waiting.hpp"
#include "errors.hpp"

namespace pf::dist {
namespace {

double g_timeout_s = 0;
std::string g_label = "a collective during set-up";

[[noreturn]] void watchdog_fired(double waited_s) {
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char host[256] = "?";
  gethostname(host, sizeof host);
  std::fprintf(stderr,
               "error: watchdog: rank %d (%s) waited %.0f s for %s; a rank has probably died or hung "
               "(--watchdog-timeout %.0f s). Aborting the job.\n",
               rank, host, waited_s, g_label.c_str(), g_timeout_s);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 4);
  std::abort();
}

}  // namespace

void set_watchdog_timeout(double seconds) {
  g_timeout_s = seconds;
}
double watchdog_timeout() {
  return g_timeout_s;
}

WaitLabel::WaitLabel(std::string text) : previous_(std::move(g_label)) {
  g_label = std::move(text);
}
WaitLabel::~WaitLabel() {
  g_label = std::move(previous_);
}

namespace {

// Polls `test` until it returns >= 0, spinning briefly, then napping; fires the watchdog.
template <typename Test>
int poll_until(Test test) {
  constexpr int kSpinTests = 20;                        // short waits (a TP all-reduce) finish while spinning
  constexpr long kFirstNapNs = 50 * 1000;               // then naps from 50 us ...
  constexpr long kLongestNapNs = 1000 * 1000;           // ... doubling up to 1 ms: a rank that waits long
  long nap_ns = kFirstNapNs;                            // (a bubble, a slow stage) costs ~1 % of a core,
  const auto start = std::chrono::steady_clock::now();  // and wakes at most 1 ms late.
  // From its third nap (some 350 us in: past a TP all-reduce's usual wait, well inside a
  // pipeline bubble), ranks sharing our CPUs may use them (node_waiting.hpp).
  constexpr long kLendFromNapNs = 4 * kFirstNapNs;
  struct Napping {
    bool on = false;
    void start() {
      if (!on) set_waiting(on = true);
    }
    ~Napping() {
      if (on) set_waiting(false);
    }
  } napping;
  for (int i = 0;; ++i) {
    const int which = test();
    if (which >= 0) return which;
    if (i < kSpinTests) continue;
    if (nap_ns >= kLendFromNapNs) napping.start();
    const timespec nap{0, nap_ns};
    nanosleep(&nap, nullptr);
    nap_ns = std::min(2 * nap_ns, kLongestNapNs);
    if (g_timeout_s > 0 && (i & 63) == 0) {
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > g_timeout_s) watchdog_fired(waited);
    }
  }
}

}  // namespace

void wait_polling(MPI_Request* request, MPI_Status* status) {
  poll_until([&] {
    int done = 0;
    MPI_CHECK(MPI_Test(request, &done, status));
    return done ? 0 : -1;
  });
}

void wait_until(const std::function<bool()>& ready) {
  poll_until([&] { return ready() ? 0 : -1; });
}

}  // namespace pf::dist
