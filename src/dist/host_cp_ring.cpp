// Host CP exchanges (see host_cp_ring.hpp): every exchange is point to point between the
// ranks that need it, so a rank with nothing to send for a peer still posts its empty
// message and every receive is matched (a rank that computes no rows of a short chunk
// takes part like the others).
#include "dist/host_cp_ring.hpp"

#include <climits>
#include <cstring>
#include <stdexcept>
#include <string>

#include "dist/wait.hpp"
#include "errors.hpp"

namespace pf::dist {
namespace {

enum Tag { kShift = 1, kGather = 2, kExchange = 3, kToFirst = 4 };

int as_count(int64_t floats) {
  if (floats < 0 || floats > INT_MAX)
    throw std::length_error("CP ring: one message of " + std::to_string(floats) +
                            " floats (a rank's K and V of a prompt for one layer, its queries or partial outputs of "
                            "a chunk, or its rows of a KV export) is beyond MPI's int count of 2^31 - 1; use more CP "
                            "ranks, or TP ranks (each holds fewer KV heads)");
  return static_cast<int>(floats);
}

int rank_in(MPI_Comm comm) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  return rank;
}

int size_of(MPI_Comm comm) {
  int size = 1;
  MPI_CHECK(MPI_Comm_size(comm, &size));
  return size;
}

void wait_all(std::vector<MPI_Request>& requests) {
  wait_until([&] {
    int done = 0;
    MPI_CHECK(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE));
    return done != 0;
  });
}

}  // namespace

HostCpRing::HostCpRing(MPI_Comm cp_comm) : CpRing(size_of(cp_comm), rank_in(cp_comm)), comm_(cp_comm) {}

void HostCpRing::start(const float* send, int64_t send_count, float* recv, int64_t recv_count) {
  MPI_CHECK(MPI_Irecv(recv, as_count(recv_count), MPI_FLOAT, previous(), kShift, comm_, &requests_[0]));
  MPI_CHECK(MPI_Isend(send, as_count(send_count), MPI_FLOAT, next(), kShift, comm_, &requests_[1]));
}

void HostCpRing::finish_shift() {
  wait_until([&] {
    int done = 0;
    MPI_CHECK(MPI_Testall(2, requests_, &done, MPI_STATUSES_IGNORE));
    return done != 0;
  });
}

void HostCpRing::gather(const float* mine, const std::vector<int64_t>& counts, float* all) {
  std::vector<MPI_Request> requests;
  int64_t at = 0;
  for (int j = 0; j < ranks(); ++j) {
    const int64_t n = counts[static_cast<size_t>(j)];
    if (j == rank()) {
      if (n > 0) std::memcpy(all + at, mine, static_cast<size_t>(n) * sizeof(float));
    } else {
      requests.emplace_back();
      MPI_CHECK(MPI_Irecv(all + at, as_count(n), MPI_FLOAT, j, kGather, comm_, &requests.back()));
      requests.emplace_back();
      MPI_CHECK(MPI_Isend(mine, as_count(counts[static_cast<size_t>(rank())]), MPI_FLOAT, j, kGather, comm_,
                          &requests.back()));
    }
    at += n;
  }
  wait_all(requests);
}

void HostCpRing::gather_to_first(const float* mine, const std::vector<int64_t>& counts, float* all) {
  std::vector<MPI_Request> requests;
  if (rank() != 0) {
    requests.emplace_back();
    MPI_CHECK(MPI_Isend(mine, as_count(counts[static_cast<size_t>(rank())]), MPI_FLOAT, 0, kToFirst, comm_,
                        &requests.back()));
  } else {
    int64_t at = 0;
    for (int j = 0; j < ranks(); ++j) {
      const int64_t n = counts[static_cast<size_t>(j)];
      if (j == 0) {
        if (n > 0) std::memcpy(all, mine, static_cast<size_t>(n) * sizeof(float));
      } else {
        requests.emplace_back();
        MPI_CHECK(MPI_Irecv(all + at, as_count(n), MPI_FLOAT, j, kToFirst, comm_, &requests.back()));
      }
      at += n;
    }
  }
  wait_all(requests);
}

void HostCpRing::exchange(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                          const std::vector<int64_t>& recv_counts) {
  std::vector<MPI_Request> requests;
  int64_t send_at = 0, recv_at = 0;
  for (int j = 0; j < ranks(); ++j) {
    const int64_t out = send_counts[static_cast<size_t>(j)], in = recv_counts[static_cast<size_t>(j)];
    if (j == rank()) {
      if (out != in) throw std::logic_error("CP all-to-all: a rank's part for itself changed size");
      if (out > 0) std::memcpy(recv + recv_at, send + send_at, static_cast<size_t>(out) * sizeof(float));
    } else {
      requests.emplace_back();
      MPI_CHECK(MPI_Irecv(recv + recv_at, as_count(in), MPI_FLOAT, j, kExchange, comm_, &requests.back()));
      requests.emplace_back();
      MPI_CHECK(MPI_Isend(send + send_at, as_count(out), MPI_FLOAT, j, kExchange, comm_, &requests.back()));
    }
    send_at += out;
    recv_at += in;
  }
  wait_all(requests);
}

}  // namespace pf::dist
