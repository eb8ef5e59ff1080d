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

}  // namespace pf::dist
