// Non-blocking collectives completed by polling (see wait.hpp).
#include "dist/collectives.hpp"

#include <time.h>

#include <climits>
#include <stdexcept>

#include "errors.hpp"

namespace pf::dist {

void allreduce_sum(float* data, int count, MPI_Comm comm) {
  MPI_Request request;
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, count, MPI_FLOAT, MPI_SUM, comm, &request));
  wait_polling(&request);
}

void broadcast_bytes(std::vector<char>& bytes, int root, MPI_Comm comm) {
  long long size = static_cast<long long>(bytes.size());
  MPI_Request request;
  MPI_CHECK(MPI_Ibcast(&size, 1, MPI_LONG_LONG, root, comm, &request));
  wait_polling(&request);
  bytes.resize(static_cast<size_t>(size));
  if (size == 0) return;
  MPI_CHECK(MPI_Ibcast(bytes.data(), static_cast<int>(size), MPI_BYTE, root, comm, &request));
  wait_polling(&request);
}

void broadcast_int(int& value, int root, MPI_Comm comm) {
  MPI_Request request;
  MPI_CHECK(MPI_Ibcast(&value, 1, MPI_INT, root, comm, &request));
  wait_polling(&request);
}

void barrier(MPI_Comm comm) {
  MPI_Request request;
  MPI_CHECK(MPI_Ibarrier(comm, &request));
  wait_polling(&request);
}

std::vector<std::vector<char>> gather_bytes(const std::vector<char>& mine, int root, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  int my_size = static_cast<int>(mine.size());
  std::vector<int> sizes(rank == root ? size : 0);
  MPI_Request request;
  MPI_CHECK(MPI_Igather(&my_size, 1, MPI_INT, sizes.data(), 1, MPI_INT, root, comm, &request));
  wait_polling(&request);
  std::vector<int> displacements(sizes.size(), 0);
  int total = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    displacements[i] = total;
    total += sizes[i];
  }
  std::vector<char> all(static_cast<size_t>(total));
  MPI_CHECK(MPI_Igatherv(mine.data(), my_size, MPI_BYTE, all.data(), sizes.data(), displacements.data(), MPI_BYTE, root,
                         comm, &request));
  wait_polling(&request);
  std::vector<std::vector<char>> blobs;
  for (size_t i = 0; i < sizes.size(); ++i)
    blobs.emplace_back(all.begin() + displacements[i], all.begin() + displacements[i] + sizes[i]);
  return blobs;
}

void gather_floats(const float* mine, int64_t count, std::vector<float>& all, int root, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  if (count > INT_MAX) throw std::length_error("gather_floats: more than 2^31 floats from one rank");
  const int my_count = static_cast<int>(count);
  std::vector<int> counts(rank == root ? size : 0), displacements(counts.size(), 0);
  MPI_Request request;
  MPI_CHECK(MPI_Igather(&my_count, 1, MPI_INT, counts.data(), 1, MPI_INT, root, comm, &request));
  wait_polling(&request);
  int64_t total = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (total > INT_MAX) throw std::length_error("gather_floats: more than 2^31 floats");
    displacements[i] = static_cast<int>(total);
    total += counts[i];
  }
  if (rank == root) all.resize(static_cast<size_t>(total));
  MPI_CHECK(MPI_Igatherv(mine, my_count, MPI_FLOAT, all.data(), counts.data(), displacements.data(), MPI_FLOAT, root,
                         comm, &request));
  wait_polling(&request);
}

}  // namespace pf::dist
