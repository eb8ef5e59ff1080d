// The CP group's exchanges in host memory (cpu backend): point-to-point MPI on the stage's CP
// communicator, waited on with naps and the watchdog (dist/wait.hpp).
#pragma once

#include <mpi.h>

#include "dist/cp_ring.hpp"

namespace pf::dist {

class HostCpRing final : public CpRing {
 public:
  explicit HostCpRing(MPI_Comm cp_comm);
  void finish_shift() override;
  void gather_to_first(const float* mine, const std::vector<int64_t>& counts, float* all) override;

 private:
  void start(const float* send, int64_t send_count, float* recv, int64_t recv_count) override;
  void gather(const float* mine, const std::vector<int64_t>& counts, float* all) override;
  void exchange(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                const std::vector<int64_t>& recv_counts) override;

  MPI_Comm comm_;
  MPI_Request requests_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
};

}  // namespace pf::dist
