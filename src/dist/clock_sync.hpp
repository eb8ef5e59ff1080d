// One time base for every rank's timeline. Rank 0 ping-pongs each rank a few times and
// keeps the sample with the shortest round trip (Cristian's algorithm); each rank then
// converts its steady-clock readings to "seconds since rank 0's run start".
#pragma once

#include <mpi.h>

#include "dist/steady_clock.hpp"  // defines: steady_seconds (the local monotonic clock)

namespace pf::dist {

struct RunClock {
  double offset_s = 0.0;     // local clock minus rank 0's clock
  double rank0_start_s = 0;  // rank 0's clock at the run's start
  double now() const { return steady_seconds() - offset_s - rank0_start_s; }
  double to_run_time(double local_s) const { return local_s - offset_s - rank0_start_s; }
};

// Collective over `comm` (rank 0 measures). Ends with all ranks agreeing on t = 0.
RunClock synchronize_clocks(MPI_Comm comm);

}  // namespace pf::dist
