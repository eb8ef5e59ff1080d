// The exchanges of a stage's context-parallel group, as a compute backend's ring attention
// uses them (compute/cpu/ring_attention.hpp): the KV shards around the ring (pass-KV), or the
// chunk's queries gathered and the partial outputs sent back to their owners (pass-Q). The
// backend's set-up builds one (host MPI: dist/host_cp_ring.hpp) and owns it. MPI-free, like
// TpAllReduce: the compute holding a pointer to it also runs in single-process tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pf::dist {

class CpRing {
 public:
  CpRing(int ranks, int rank) : ranks_(ranks), rank_(rank) {}
  virtual ~CpRing() = default;
  CpRing(const CpRing&) = delete;
  CpRing& operator=(const CpRing&) = delete;

  int ranks() const { return ranks_; }
  int rank() const { return rank_; }
  int next() const { return (rank_ + 1) % ranks_; }
  int previous() const { return (rank_ + ranks_ - 1) % ranks_; }

  // One ring step, started and then finished so that attention runs in between: `send_count`
  // floats to the next rank, `recv_count` from the previous one into `recv`. Neither buffer
  // may be touched until finish_shift().
  void start_shift(const float* send, int64_t send_count, float* recv, int64_t recv_count) {
    bytes_sent_ += 4 * send_count;
    start(send, send_count, recv, recv_count);
  }
  virtual void finish_shift() = 0;
  // Rank j's `counts[j]` floats, concatenated in rank order into `all`, on every rank
  // (this rank's part is `mine`).
  void all_gather(const float* mine, const std::vector<int64_t>& counts, float* all) {
    bytes_sent_ += 4 * counts[static_cast<size_t>(rank_)] * (ranks_ - 1);
    gather(mine, counts, all);
  }
  // `send_counts[j]` floats of `send` (concatenated in rank order) to rank j, and
  // `recv_counts[j]` from rank j into `recv` (concatenated likewise).
  void all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                  const std::vector<int64_t>& recv_counts) {
    for (int j = 0; j < ranks_; ++j)
      if (j != rank_) bytes_sent_ += 4 * send_counts[static_cast<size_t>(j)];
    exchange(send, send_counts, recv, recv_counts);
  }

  // Rank j's `counts[j]` floats, concatenated in rank order into `all` on rank 0 only (this
  // rank's part is `mine`; `all` is not touched elsewhere): what rank 0 writes for the group.
  // Not counted as ring traffic.
  virtual void gather_to_first(const float* mine, const std::vector<int64_t>& counts, float* all) = 0;

  // Bytes this rank has sent to the others so far (the summary's CP traffic).
  int64_t bytes_sent() const { return bytes_sent_; }

 protected:
  virtual void start(const float* send, int64_t send_count, float* recv, int64_t recv_count) = 0;
  virtual void gather(const float* mine, const std::vector<int64_t>& counts, float* all) = 0;
  virtual void exchange(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                        const std::vector<int64_t>& recv_counts) = 0;

 private:
  int ranks_, rank_;
  int64_t bytes_sent_ = 0;
};

}  // namespace pf::dist
