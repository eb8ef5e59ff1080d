// Where the cpu backend's compute time went, by kind of op, summed over every rank: one line
// of the summary with each kind's share of the forward time and its achieved GFLOP/s a rank,
// so a user sees what bounds a run (attention or the projections) without a profiler.
#pragma once

#include <cstdio>

#include "compute/op_times.hpp"
#include "dist/topology.hpp"

namespace pf::trace {

// Collective over MPI_COMM_WORLD: the sum of every rank's op times (on rank 0).
compute::OpTimes gather_op_times(const compute::OpTimes& mine);

// "cpu time: attention 58 % at 84.1 GFLOP/s a rank, projections 37 % at 86.0, the rest 5 % ..."
// (nothing when no forward was timed).
void print_op_times(const compute::OpTimes& all, std::FILE* out);

}  // namespace pf::trace
