// TP all-reduces of device buffers (cuda backend): ncclAllReduce enqueued on the forward
// stream (the host goes on at once; the time is inside the compute's device spans), or,
// for ranks without NCCL peers (--transport mpi), staged through host memory and MPI
// (the host blocks; each reduce is an all-reduce span on the timeline).
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <vector>

#include "dist/tp_all_reduce.hpp"

namespace pf::dist {

class NcclAllReduce final : public TpAllReduce {
 public:
  NcclAllReduce(ncclComm_t tp_comm, cudaStream_t forward)
      : TpAllReduce(/*blocks_host=*/false), tp_comm_(tp_comm), forward_(forward) {}

 private:
  void reduce(float* data, int count) override;
  ncclComm_t tp_comm_;
  cudaStream_t forward_;
};

class StagedAllReduce final : public TpAllReduce {
 public:
  StagedAllReduce(MPI_Comm tp_comm, cudaStream_t forward)
      : TpAllReduce(/*blocks_host=*/true), tp_comm_(tp_comm), forward_(forward) {}

 private:
  void reduce(float* data, int count) override;
  MPI_Comm tp_comm_;
  cudaStream_t forward_;
  std::vector<float> host_;
};

}  // namespace pf::dist
