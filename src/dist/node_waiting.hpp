// Which ranks of this node are waiting: a board in the node's shared memory, one slot a rank,
// so that ranks sharing CPUs can lend them. A pipeline stage waiting for its next micro-batch
// (the bubble: the first stage after its last chunk, the last before its first) leaves its
// CPUs idle; the ranks it shares them with see it waiting and run their kernels on more
// threads until it wakes (compute/cpu/rank_threads.cpp). The main thread marks its rank
// waiting when a wait (wait.hpp) starts to nap, and working when the wait returns.
#pragma once

#include <mpi.h>

#include <vector>

namespace pf::dist {

// Collective over `world`: maps the node's board, one slot per rank of the node. `sharers`:
// the node-local ranks (MPI_COMM_TYPE_SHARED order) whose CPUs overlap this rank's, itself
// included. False where the node could not share memory (shm_open or mmap refused on any of
// its ranks): then there is no board, and ranks must not lend.
bool open_node_waiting(MPI_Comm world, const std::vector<int>& sharers);

// Marks this rank waiting or working; only the thread that opened the board writes.
void set_waiting(bool waiting);

// The sharers working now (this rank included, when it asks while working), at least 1.
int working_sharers();

}  // namespace pf::dist
