// Collectives used by the pipeline and the driver, all waited on with wait_polling.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "dist/wait.hpp"

namespace pf::dist {

void allreduce_sum(float* data, int count, MPI_Comm comm);
void broadcast_bytes(std::vector<char>& bytes, int root, MPI_Comm comm);  // resizes on receivers
void barrier(MPI_Comm comm);
void broadcast_int(int& value, int root, MPI_Comm comm);
// Gathers variable-length byte blobs to `root`; returns one blob per rank there, nothing elsewhere.
std::vector<std::vector<char>> gather_bytes(const std::vector<char>& mine, int root, MPI_Comm comm);

}  // namespace pf::dist
