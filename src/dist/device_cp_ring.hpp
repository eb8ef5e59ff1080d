// The CP group's exchanges of device buffers (cuda backend): NCCL send/recv enqueued on the
// forward stream, grouped so that a ring's sends and receives never wait for each other (the
// host goes on at once; a shift's transfer is ordered before the attention that reads what
// it brought), or, for ranks without NCCL peers (--transport mpi), staged through host
// memory and the host ring's MPI (the host blocks). Every pointer is device memory.
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <vector>

#include "dist/cp_ring.hpp"
#include "dist/host_cp_ring.hpp"

namespace pf::dist {

class NcclCpRing final : public CpRing {
 public:
  NcclCpRing(ncclComm_t cp_comm, int ranks, int rank, cudaStream_t forward)
      : CpRing(ranks, rank), comm_(cp_comm), forward_(forward) {}
  void finish_shift() override {}  // (stream order)
  void gather_to_first(const float* mine, const std::vector<int64_t>& counts, float* all) override;

 private:
  void start(const float* send, int64_t send_count, float* recv, int64_t recv_count) override;
  void gather(const float* mine, const std::vector<int64_t>& counts, float* all) override;
  void exchange(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                const std::vector<int64_t>& recv_counts) override;
  void copy_local(float* to, const float* from, int64_t count);
  ncclComm_t comm_;
  cudaStream_t forward_;
};

class StagedCpRing final : public CpRing {
 public:
  StagedCpRing(MPI_Comm cp_comm, int ranks, int rank, cudaStream_t forward);
  void finish_shift() override {}  // (start() has done it)
  void gather_to_first(const float* mine, const std::vector<int64_t>& counts, float* all) override;

 private:
  void start(const float* send, int64_t send_count, float* recv, int64_t recv_count) override;
  void gather(const float* mine, const std::vector<int64_t>& counts, float* all) override;
  void exchange(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                const std::vector<int64_t>& recv_counts) override;
  // The host copy of `count` device floats (after the forward stream's work so far), and back.
  const float* to_host(const float* device, int64_t count, std::vector<float>& host);
  void to_device(float* device, const std::vector<float>& host);
  HostCpRing host_;
  cudaStream_t forward_;
  std::vector<float> send_host_, recv_host_;
};

}  // namespace pf::dist
