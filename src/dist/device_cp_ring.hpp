// The CP group's exchanges of device buffers (cuda backend): NCCL send/recv, grouped so that
// a ring's sends and receives never wait for each other, or, for ranks without NCCL peers
// (--transport mpi), staged through host memory and the host ring's MPI (the host blocks).
// Every pointer is device memory.
//
// A pass-KV shift runs on a communication stream of its own, so that the transfer of the
// next shard overlaps the attention on the shard already here: it starts once the forward
// stream has reached it (everything that wrote the send buffer or last read the receive
// buffer), and finish_shift() makes the forward stream wait for its arrival. The other
// exchanges (pass-Q's gather and all-to-all, the rows' gather) are on the forward stream:
// their results are needed at once. The two streams never run NCCL work of this
// communicator at the same time, so every rank issues it in one order.
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
  NcclCpRing(ncclComm_t cp_comm, int ranks, int rank, cudaStream_t forward);
  ~NcclCpRing() override;
  NcclCpRing(const NcclCpRing&) = delete;
  NcclCpRing& operator=(const NcclCpRing&) = delete;
  void finish_shift() override;  // the forward stream waits for the shift's arrival
  void gather_to_first(const float* mine, const std::vector<int64_t>& counts, float* all) override;

 private:
  void start(const float* send, int64_t send_count, float* recv, int64_t recv_count) override;
  void gather(const float* mine, const std::vector<int64_t>& counts, float* all) override;
  void exchange(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                const std::vector<int64_t>& recv_counts) override;
  void copy_local(float* to, const float* from, int64_t count);
  ncclComm_t comm_;
  cudaStream_t forward_;
  cudaStream_t shifts_ = nullptr;                      // pass-KV's transfers
  cudaEvent_t reached_ = nullptr, arrived_ = nullptr;  // forward -> shifts_, shifts_ -> forward
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
