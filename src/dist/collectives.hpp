// Collectives used by the pipeline and the driver, all waited on with wait_polling.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dist/wait.hpp"

namespace pf::dist {

void allreduce_sum(float* data, int count, MPI_Comm comm);
void broadcast_bytes(std::vector<char>& bytes, int root, MPI_Comm comm);  // resizes on receivers
// Rank 0's vector of trivially copyable values, on every rank of `comm` (resized there).
template <typename T>
void broadcast_vector(std::vector<T>& values, MPI_Comm comm) {
  std::vector<char> bytes(values.size() * sizeof(T));
  if (!bytes.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  broadcast_bytes(bytes, 0, comm);
  values.resize(bytes.size() / sizeof(T));
  if (!bytes.empty()) std::memcpy(values.data(), bytes.data(), bytes.size());
}
void barrier(MPI_Comm comm);
void broadcast_int(int& value, int root, MPI_Comm comm);
// Gathers variable-length byte blobs to `root`; returns one blob per rank there, nothing elsewhere.
std::vector<std::vector<char>> gather_bytes(const std::vector<char>& mine, int root, MPI_Comm comm);
// gather_bytes for vectors of trivially copyable values: one vector per rank on `root`.
template <typename T>
std::vector<std::vector<T>> gather_vector(const std::vector<T>& mine, int root, MPI_Comm comm) {
  std::vector<char> bytes(mine.size() * sizeof(T));
  if (!bytes.empty()) std::memcpy(bytes.data(), mine.data(), bytes.size());
  std::vector<std::vector<T>> all;
  for (const auto& blob : gather_bytes(bytes, root, comm)) {
    all.emplace_back(blob.size() / sizeof(T));
    if (!blob.empty()) std::memcpy(all.back().data(), blob.data(), all.back().size() * sizeof(T));
  }
  return all;
}

}  // namespace pf::dist
