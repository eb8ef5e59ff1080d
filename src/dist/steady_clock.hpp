// The local monotonic clock every host timing in pipefill reads. MPI-free, so compute
// backends and the TP reducers (linked into single-process benchmarks) can use it too;
// dist/clock_sync.hpp turns its readings into run time.
#pragma once

#include <chrono>

namespace pf::dist {

inline double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace pf::dist
