// Device TP all-reduces (see device_all_reduce.hpp).
#include "dist/device_all_reduce.hpp"

#include "device/cuda_check.hpp"
#include "dist/collectives.hpp"
#include "dist/nccl_comms.hpp"

namespace pf::dist {

void NcclAllReduce::reduce(float* data, int count) {
  NCCL_CHECK(ncclAllReduce(data, data, static_cast<size_t>(count), ncclFloat, ncclSum, tp_comm_, forward_));
}

void StagedAllReduce::reduce(float* data, int count) {
  host_.resize(count);
  CUDA_CHECK(cudaMemcpyAsync(host_.data(), data, sizeof(float) * count, cudaMemcpyDeviceToHost, forward_));
  CUDA_CHECK(cudaStreamSynchronize(forward_));
  allreduce_sum(host_.data(), count, tp_comm_);
  CUDA_CHECK(cudaMemcpyAsync(data, host_.data(), sizeof(float) * count, cudaMemcpyHostToDevice, forward_));
  CUDA_CHECK(cudaStreamSynchronize(forward_));
}

}  // namespace pf::dist
