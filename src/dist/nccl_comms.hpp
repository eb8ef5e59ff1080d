// The GPU side of a rank's placement: which device it drives, and its NCCL communicators,
// bootstrapped from MPI (rank 0's ncclUniqueId travels by MPI_Bcast).
//
//   world      all ranks (ncclCommInitRank)
//   tp         this stage's TP group of this CP rank (ncclCommSplit): the all-reduces
//   cp         this stage's CP group of this TP rank (--cp): the ring attention
//   send_link  the 2-rank link to the same CP and TP rank of the next stage (rank 0 = this one)
//   recv_link  the link from the previous stage (rank 1 = this one)
// One communicator per link and direction keeps every communicator used by one stream
// per rank, in the same order on both ends: sends never queue behind receives.
#pragma once

#include <nccl.h>

#include "dist/topology.hpp"
#include "errors.hpp"

#define NCCL_CHECK(stmt) PF_CHECK_TEMPLATE("NCCL", stmt, PF_NCCL_OK, PF_NCCL_DETAIL)
#define PF_NCCL_OK(r) ((r) == ncclSuccess)
#define PF_NCCL_DETAIL(r) std::string(ncclGetErrorString(r))

namespace pf::dist {

// Collective. Local rank = rank within MPI_COMM_TYPE_SHARED; device = local rank modulo
// the visible devices (all of the node's, or one bound per task by the launcher). Two ranks
// on one physical GPU (same UUID) only with the mpi transport. UserError when no device is
// usable. Returns the device ordinal, already set with cudaSetDevice.
int select_device(const Topology& topology, bool allow_shared_device);

struct NcclComms {
  ncclComm_t world = nullptr;
  ncclComm_t tp = nullptr;
  ncclComm_t cp = nullptr;  // null without --cp
  ncclComm_t send_link = nullptr;
  ncclComm_t recv_link = nullptr;
};

// Collective over MPI_COMM_WORLD (every rank calls it, in the same order).
NcclComms make_nccl_comms(const Topology& topology);
void destroy_nccl_comms(NcclComms& comms);

}  // namespace pf::dist
