// Device CP exchanges (see device_cp_ring.hpp).
#include "dist/device_cp_ring.hpp"

#include <numeric>
#include <stdexcept>

#include "device/cuda_check.hpp"
#include "dist/nccl_comms.hpp"

namespace pf::dist {
namespace {

int64_t total(const std::vector<int64_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), int64_t{0});
}

}  // namespace

NcclCpRing::NcclCpRing(ncclComm_t cp_comm, int ranks, int rank, cudaStream_t forward)
    : CpRing(ranks, rank), comm_(cp_comm), forward_(forward) {
  CUDA_CHECK(cudaStreamCreateWithFlags(&shifts_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&reached_, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&arrived_, cudaEventDisableTiming));
}

NcclCpRing::~NcclCpRing() {
  // (destructors do not throw: a failure here is reported by the next CUDA call, if any)
  cudaStreamSynchronize(shifts_);
  cudaEventDestroy(reached_);
  cudaEventDestroy(arrived_);
  cudaStreamDestroy(shifts_);
}

void NcclCpRing::copy_local(float* to, const float* from, int64_t count) {
  if (count > 0) CUDA_CHECK(cudaMemcpyAsync(to, from, sizeof(float) * count, cudaMemcpyDeviceToDevice, forward_));
}

// Each group posts its sends before its receives: NCCL runs a group's operations together,
// and the host simulator's buffered sends then never wait behind a receive.
void NcclCpRing::start(const float* send, int64_t send_count, float* recv, int64_t recv_count) {
  CUDA_CHECK(cudaEventRecord(reached_, forward_));
  CUDA_CHECK(cudaStreamWaitEvent(shifts_, reached_, 0));
  NCCL_CHECK(ncclGroupStart());
  NCCL_CHECK(ncclSend(send, static_cast<size_t>(send_count), ncclFloat32, next(), comm_, shifts_));
  NCCL_CHECK(ncclRecv(recv, static_cast<size_t>(recv_count), ncclFloat32, previous(), comm_, shifts_));
  NCCL_CHECK(ncclGroupEnd());
  CUDA_CHECK(cudaEventRecord(arrived_, shifts_));
}

void NcclCpRing::finish_shift() {
  CUDA_CHECK(cudaStreamWaitEvent(forward_, arrived_, 0));
}

void NcclCpRing::gather(const float* mine, const std::vector<int64_t>& counts, float* all) {
  const int64_t my_count = counts[static_cast<size_t>(rank())];
  NCCL_CHECK(ncclGroupStart());
  for (int j = 0; j < ranks(); ++j)
    if (j != rank()) NCCL_CHECK(ncclSend(mine, static_cast<size_t>(my_count), ncclFloat32, j, comm_, forward_));
  int64_t at = 0;
  for (int j = 0; j < ranks(); ++j) {
    const int64_t n = counts[static_cast<size_t>(j)];
    if (j != rank()) NCCL_CHECK(ncclRecv(all + at, static_cast<size_t>(n), ncclFloat32, j, comm_, forward_));
    at += n;
  }
  NCCL_CHECK(ncclGroupEnd());
  int64_t mine_at = 0;
  for (int j = 0; j < rank(); ++j) mine_at += counts[static_cast<size_t>(j)];
  copy_local(all + mine_at, mine, my_count);
}

void NcclCpRing::exchange(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                          const std::vector<int64_t>& recv_counts) {
  NCCL_CHECK(ncclGroupStart());
  int64_t at = 0;
  for (int j = 0; j < ranks(); ++j) {
    const int64_t n = send_counts[static_cast<size_t>(j)];
    if (j != rank()) NCCL_CHECK(ncclSend(send + at, static_cast<size_t>(n), ncclFloat32, j, comm_, forward_));
    at += n;
  }
  at = 0;
  for (int j = 0; j < ranks(); ++j) {
    const int64_t n = recv_counts[static_cast<size_t>(j)];
    if (j != rank()) NCCL_CHECK(ncclRecv(recv + at, static_cast<size_t>(n), ncclFloat32, j, comm_, forward_));
    at += n;
  }
  NCCL_CHECK(ncclGroupEnd());
  int64_t send_at = 0, recv_at = 0;
  for (int j = 0; j < rank(); ++j) {
    send_at += send_counts[static_cast<size_t>(j)];
    recv_at += recv_counts[static_cast<size_t>(j)];
  }
  if (send_counts[static_cast<size_t>(rank())] != recv_counts[static_cast<size_t>(rank())])
    throw std::logic_error("CP all-to-all: a rank's part for itself changed size");
  copy_local(recv + recv_at, send + send_at, send_counts[static_cast<size_t>(rank())]);
}

void NcclCpRing::gather_to_first(const float* mine, const std::vector<int64_t>& counts, float* all) {
  const int64_t my_count = counts[static_cast<size_t>(rank())];
  if (rank() != 0) {
    NCCL_CHECK(ncclSend(mine, static_cast<size_t>(my_count), ncclFloat32, 0, comm_, forward_));
    return;
  }
  NCCL_CHECK(ncclGroupStart());
  int64_t at = my_count;
  for (int j = 1; j < ranks(); ++j) {
    const int64_t n = counts[static_cast<size_t>(j)];
    NCCL_CHECK(ncclRecv(all + at, static_cast<size_t>(n), ncclFloat32, j, comm_, forward_));
    at += n;
  }
  NCCL_CHECK(ncclGroupEnd());
  copy_local(all, mine, my_count);
}

StagedCpRing::StagedCpRing(MPI_Comm cp_comm, int ranks, int rank, cudaStream_t forward)
    : CpRing(ranks, rank), host_(cp_comm), forward_(forward) {}

const float* StagedCpRing::to_host(const float* device, int64_t count, std::vector<float>& host) {
  host.resize(static_cast<size_t>(count));
  if (count > 0)
    CUDA_CHECK(cudaMemcpyAsync(host.data(), device, sizeof(float) * count, cudaMemcpyDeviceToHost, forward_));
  CUDA_CHECK(cudaStreamSynchronize(forward_));
  return host.data();
}

void StagedCpRing::to_device(float* device, const std::vector<float>& host) {
  if (!host.empty())
    CUDA_CHECK(cudaMemcpyAsync(device, host.data(), sizeof(float) * host.size(), cudaMemcpyHostToDevice, forward_));
  CUDA_CHECK(cudaStreamSynchronize(forward_));  // the host buffers are reused by the next exchange
}

void StagedCpRing::start(const float* send, int64_t send_count, float* recv, int64_t recv_count) {
  const float* out = to_host(send, send_count, send_host_);
  recv_host_.resize(static_cast<size_t>(recv_count));
  host_.start_shift(out, send_count, recv_host_.data(), recv_count);
  host_.finish_shift();
  to_device(recv, recv_host_);
}

void StagedCpRing::gather(const float* mine, const std::vector<int64_t>& counts, float* all) {
  const float* out = to_host(mine, counts[static_cast<size_t>(rank())], send_host_);
  recv_host_.resize(static_cast<size_t>(total(counts)));
  host_.all_gather(out, counts, recv_host_.data());
  to_device(all, recv_host_);
}

void StagedCpRing::exchange(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                            const std::vector<int64_t>& recv_counts) {
  const float* out = to_host(send, total(send_counts), send_host_);
  recv_host_.resize(static_cast<size_t>(total(recv_counts)));
  host_.all_to_all(out, send_counts, recv_host_.data(), recv_counts);
  to_device(recv, recv_host_);
}

void StagedCpRing::gather_to_first(const float* mine, const std::vector<int64_t>& counts, float* all) {
  const float* out = to_host(mine, counts[static_cast<size_t>(rank())], send_host_);
  recv_host_.resize(rank() == 0 ? static_cast<size_t>(total(counts)) : 0);
  host_.gather_to_first(out, counts, recv_host_.data());
  if (rank() == 0) to_device(all, recv_host_);
}

}  // namespace pf::dist
