// Clock offset measurement (see clock_sync.hpp).
#include "dist/clock_sync.hpp"

#include <vector>

#include "dist/collectives.hpp"
#include "errors.hpp"

namespace pf::dist {

RunClock synchronize_clocks(MPI_Comm comm) {
  constexpr int kRounds = 8, kTag = 7101;
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  std::vector<double> offsets(size, 0.0);
  for (int peer = 1; peer < size; ++peer) {
    if (rank == 0) {
      double best_rtt = 1e30;
      for (int round = 0; round < kRounds; ++round) {
        const double sent = steady_seconds();
        double remote = 0;
        MPI_CHECK(MPI_Send(&sent, 1, MPI_DOUBLE, peer, kTag, comm));
        MPI_CHECK(MPI_Recv(&remote, 1, MPI_DOUBLE, peer, kTag, comm, MPI_STATUS_IGNORE));
        const double received = steady_seconds();
        if (received - sent < best_rtt) {
          best_rtt = received - sent;
          offsets[peer] = remote - 0.5 * (sent + received);
        }
      }
    } else if (rank == peer) {
      for (int round = 0; round < kRounds; ++round) {
        double sent = 0;
        MPI_CHECK(MPI_Recv(&sent, 1, MPI_DOUBLE, 0, kTag, comm, MPI_STATUS_IGNORE));
        const double now = steady_seconds();
        MPI_CHECK(MPI_Send(&now, 1, MPI_DOUBLE, 0, kTag, comm));
      }
    }
  }
  RunClock clock;
  double start = rank == 0 ? steady_seconds() : 0.0;
  MPI_Request request;
  MPI_CHECK(MPI_Iscatter(offsets.data(), 1, MPI_DOUBLE, &clock.offset_s, 1, MPI_DOUBLE, 0, comm, &request));
  wait_polling(&request);
  MPI_CHECK(MPI_Ibcast(&start, 1, MPI_DOUBLE, 0, comm, &request));
  wait_polling(&request);
  clock.rank0_start_s = start;
  return clock;
}

}  // namespace pf::dist
