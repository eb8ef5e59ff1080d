// Device selection and NCCL bootstrap (see nccl_comms.hpp).
#include "dist/nccl_comms.hpp"

#include <cuda_runtime.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "dist/checked_step.hpp"

namespace pf::dist {

int select_device(const Topology& topo, bool allow_shared_device) {
  MPI_Comm node = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, topo.world_rank, MPI_INFO_NULL, &node));
  int local_rank = 0, local_size = 1;
  MPI_CHECK(MPI_Comm_rank(node, &local_rank));
  MPI_CHECK(MPI_Comm_size(node, &local_size));
  char host[256] = "?";
  gethostname(host, sizeof host - 1);

  // Each rank takes the GPU of its local rank among those it sees: all of the node's, or
  // the one a launcher bound to it (CUDA_VISIBLE_DEVICES per task).
  int devices = 0, device = -1;
  cudaDeviceProp prop{};
  dist::checked_step(MPI_COMM_WORLD, [&] {
    const cudaError_t status = cudaGetDeviceCount(&devices);
    if (status != cudaSuccess || devices == 0)
      throw UserError(std::string("--backend cuda: no usable CUDA device on ") + host + " (" +
                      (status != cudaSuccess ? cudaGetErrorString(status) : "none visible") + ")");
    device = local_rank % devices;
    if (cudaSetDevice(device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess)
      throw UserError(std::string("--backend cuda: cannot use GPU ") + std::to_string(device) + " on " + host);
  });

  // Two ranks of a node on one physical GPU (same UUID) is for --transport mpi only:
  // NCCL refuses it, and it would halve each rank's memory.
  std::vector<char> uuids(static_cast<size_t>(local_size) * sizeof(prop.uuid));
  MPI_CHECK(MPI_Allgather(&prop.uuid, sizeof(prop.uuid), MPI_BYTE, uuids.data(), sizeof(prop.uuid), MPI_BYTE, node));
  MPI_CHECK(MPI_Comm_free(&node));
  int sharing = 0;
  for (int r = 0; r < local_size; ++r)
    if (r != local_rank && std::memcmp(&uuids[r * sizeof(prop.uuid)], &prop.uuid, sizeof(prop.uuid)) == 0) ++sharing;
  dist::checked_step(MPI_COMM_WORLD, [&] {
    if (sharing > 0 && !allow_shared_device)
      throw UserError(std::to_string(sharing + 1) + " ranks on " + host + " share GPU " + std::to_string(device) +
                      " (" + prop.name +
                      "): NCCL needs one GPU per rank; use --transport mpi to share a GPU "
                      "(tests), or fewer ranks per node");
  });
  return device;
}

namespace {

// The colour of the link between stage s and s + 1 (same TP rank) in the split that holds
// links whose lower stage has parity `parity`; NOCOLOR when this rank is on no such link.
int link_colour(const Topology& topo, int parity) {
  const int s = topo.stage, in_stage = topo.cp_rank * topo.tp + topo.tp_rank, per_stage = topo.cp * topo.tp;
  if (s % 2 == parity && s + 1 < topo.pp) return (s / 2) * per_stage + in_stage;     // sender end
  if (s >= 1 && (s - 1) % 2 == parity) return ((s - 1) / 2) * per_stage + in_stage;  // receiver end
  return NCCL_SPLIT_NOCOLOR;
}

}  // namespace

NcclComms make_nccl_comms(const Topology& topo) {
  NcclComms comms;
  ncclUniqueId id;
  if (topo.world_rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD));
  NCCL_CHECK(ncclCommInitRank(&comms.world, topo.world_size, id, topo.world_rank));
  NCCL_CHECK(ncclCommSplit(comms.world, topo.stage * topo.cp + topo.cp_rank, topo.tp_rank, &comms.tp, nullptr));
  if (topo.cp > 1)
    NCCL_CHECK(ncclCommSplit(comms.world, topo.stage * topo.tp + topo.tp_rank, topo.cp_rank, &comms.cp, nullptr));
  for (int parity = 0; parity < 2; ++parity) {
    ncclComm_t link = nullptr;
    // key = stage: the lower stage is rank 0 of the 2-rank link.
    NCCL_CHECK(ncclCommSplit(comms.world, link_colour(topo, parity), topo.stage, &link, nullptr));
    if (!link) continue;
    if (topo.stage % 2 == parity)
      comms.send_link = link;
    else
      comms.recv_link = link;
  }
  return comms;
}

void destroy_nccl_comms(NcclComms& comms) {
  for (ncclComm_t* c : {&comms.send_link, &comms.recv_link, &comms.cp, &comms.tp, &comms.world}) {
    if (*c) ncclCommDestroy(*c);
    *c = nullptr;
  }
}

}  // namespace pf::dist
