// The NCCL calls pipefill makes, over MPI, on the simulated device: a communicator is an MPI
// communicator; send, recv and all-reduce are queued on their stream like any device work
// and then run at once together with what the stream holds before them (the GPU's NCCL
// kernels make progress on their own; a queue that waited for the host to force it could
// hold a peer's receive forever). Sends copy their data and never block; a receive blocks
// until its data is in (the sender has run its send by then: a peer announces a chunk only
// after enqueuing it). Float sums only, as pipefill uses. Communicators: the world (from
// ncclCommInitRank on every rank) and ncclCommSplit of it.
#include <mpi.h>
#include <nccl.h>

#include <cstring>
#include <list>
#include <mutex>
#include <vector>

#include "runtime_sim/sim_device.hpp"

struct ncclComm {
  MPI_Comm mpi = MPI_COMM_NULL;
  std::list<std::pair<MPI_Request, std::vector<char>>> sends;  // in flight, with their copies
};

namespace {

size_t type_bytes(ncclDataType_t type) {
  switch (type) {
    case ncclFloat32:
      return 4;
    case ncclBfloat16:
      return 2;
    default:
      return 0;
  }
}

// Completed sends give their copies back (an MPI_Request must be completed at some point).
void reap(ncclComm* comm, bool wait_all) {
  for (auto it = comm->sends.begin(); it != comm->sends.end();) {
    int done = 0;
    if (wait_all)
      MPI_Wait(&it->first, MPI_STATUS_IGNORE), done = 1;
    else
      MPI_Test(&it->first, &done, MPI_STATUS_IGNORE);
    it = done ? comm->sends.erase(it) : std::next(it);
  }
}

// Queues `work` on the stream, then runs the stream through it.
ncclResult_t run_on(cudaStream_t stream, std::function<void()> work) {
  pf::sim::SimDevice& device = pf::sim::SimDevice::get();
  std::lock_guard<std::recursive_mutex> hold(device.lock());
  pf::sim::SimStream* s = device.stream(stream);
  device.enqueue(s, std::move(work));
  device.run_stream(s);
  return ncclSuccess;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id, 0, sizeof(*id));
  std::strncpy(id->internal, "pipefill-sim-world", sizeof(id->internal) - 1);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  int world_size = 0, world_rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  // Only the world communicator is made directly (every rank calls this); others by split.
  if (std::strcmp(id.internal, "pipefill-sim-world") != 0 || nranks != world_size || rank != world_rank)
    return ncclInvalidUsage;
  *comm = new ncclComm;
  MPI_Comm_dup(MPI_COMM_WORLD, &(*comm)->mpi);
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t*) {
  MPI_Comm split = MPI_COMM_NULL;
  MPI_Comm_split(comm->mpi, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &split);
  *newcomm = nullptr;
  if (split != MPI_COMM_NULL) {
    *newcomm = new ncclComm;
    (*newcomm)->mpi = split;
  }
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  reap(comm, /*wait_all=*/true);
  MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}

// Groups change nothing here: sends never block, and pipefill's groups post their sends
// before their receives (dist/device_cp_ring.cpp).
ncclResult_t ncclGroupStart() {
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd() {
  return ncclSuccess;
}

ncclResult_t ncclSend(const void* data, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  const size_t bytes = count * type_bytes(type);
  if (bytes == 0 && count > 0) return ncclInvalidArgument;
  return run_on(stream, [=] {
    reap(comm, false);
    comm->sends.emplace_back(MPI_REQUEST_NULL,
                             std::vector<char>(static_cast<const char*>(data), static_cast<const char*>(data) + bytes));
    auto& sent = comm->sends.back();
    MPI_Isend(sent.second.data(), static_cast<int>(bytes), MPI_BYTE, peer, 0, comm->mpi, &sent.first);
  });
}

ncclResult_t ncclRecv(void* data, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * type_bytes(type);
  if (bytes == 0 && count > 0) return ncclInvalidArgument;
  return run_on(stream,
                [=] { MPI_Recv(data, static_cast<int>(bytes), MPI_BYTE, peer, 0, comm->mpi, MPI_STATUS_IGNORE); });
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  if (type != ncclFloat32 || op != ncclSum) return ncclInvalidArgument;
  return run_on(stream, [=] {
    MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm->mpi);
  });
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclInvalidUsage:
      return "invalid usage (the host simulator makes the world communicator and its splits)";
    case ncclInvalidArgument:
      return "invalid argument (the host simulator sums float32 only)";
    default:
      return "unhandled error (simulated NCCL)";
  }
}

}  // extern "C"
