// The TP all-reduce of host memory (cpu backend): MPI_Iallreduce on the stage's TP
// communicator, waited on with naps and the watchdog (dist/collectives.hpp).
#pragma once

#include <mpi.h>

#include "dist/tp_all_reduce.hpp"

namespace pf::dist {

class HostAllReduce final : public TpAllReduce {
 public:
  explicit HostAllReduce(MPI_Comm tp_comm) : TpAllReduce(/*blocks_host=*/true), tp_comm_(tp_comm) {}

 private:
  void reduce(float* data, int count) override;
  MPI_Comm tp_comm_;
};

}  // namespace pf::dist
