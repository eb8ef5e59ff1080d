// See node_waiting.hpp. The board is a POSIX shared-memory object that the node's first rank
// creates under a name no other job uses, that every rank of the node maps, and that is
// unlinked as soon as all have mapped it: nothing is left behind in /dev/shm, even when a
// rank is killed after it. One 64-byte slot a rank (no false sharing); plain atomic loads and stores.
#include "dist/node_waiting.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <random>
#include <thread>

namespace pf::dist {
namespace {

constexpr size_t kSlotBytes = 64;

struct Board {
  char* slots = nullptr;  // ranks_on_node slots
  size_t bytes = 0;
  std::vector<int> sharers;  // node ranks whose slots count
  int self = 0;              // this rank's node rank
  std::thread::id writer;    // the thread that marks this rank
};

Board board;

int* slot(int node_rank) {
  return reinterpret_cast<int*>(board.slots + static_cast<size_t>(node_rank) * kSlotBytes);
}

}  // namespace

bool open_node_waiting(MPI_Comm world, const std::vector<int>& sharers) {
  MPI_Comm node;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int self = 0, ranks = 1;
  MPI_Comm_rank(node, &self);
  MPI_Comm_size(node, &ranks);
  const size_t bytes = static_cast<size_t>(ranks) * kSlotBytes;
  char name[64] = "";
  if (self == 0) {
    std::random_device entropy;
    std::snprintf(name, sizeof name, "/pipefill-%d-%08x", static_cast<int>(getpid()), entropy());
    const int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      if (fd >= 0) {
        close(fd);
        shm_unlink(name);
      }
      name[0] = '\0';  // no board: nobody lends
    } else {
      close(fd);
    }
  }
  MPI_Bcast(name, sizeof name, MPI_CHAR, 0, node);
  char* mapped = nullptr;
  if (name[0] != '\0') {
    const int fd = shm_open(name, O_RDWR, 0600);
    if (fd >= 0) {
      void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      close(fd);
      if (p != MAP_FAILED) mapped = static_cast<char*>(p);
    }
  }
  // Every rank has mapped it (or failed to) before it is unlinked; a rank that failed makes
  // the whole node go without, so that no rank counts a slot nobody writes.
  int ok = mapped != nullptr, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, node);
  if (self == 0 && name[0] != '\0') shm_unlink(name);
  MPI_Comm_free(&node);
  if (board.slots) munmap(board.slots, board.bytes);  // a second open replaces the first
  board = Board();
  if (!all_ok) {
    if (mapped) munmap(mapped, bytes);
    return false;
  }
  board.slots = mapped;
  board.bytes = bytes;
  board.sharers = sharers;
  board.self = self;
  board.writer = std::this_thread::get_id();
  __atomic_store_n(slot(self), 0, __ATOMIC_RELAXED);  // (ftruncate zeroed it: working)
  return true;
}

void set_waiting(bool waiting) {
  if (!board.slots || std::this_thread::get_id() != board.writer) return;
  __atomic_store_n(slot(board.self), waiting ? 1 : 0, __ATOMIC_RELAXED);
}

int working_sharers() {
  if (!board.slots) return 1;
  int working = 0;
  for (int r : board.sharers) working += __atomic_load_n(slot(r), __ATOMIC_RELAXED) == 0;
  return working > 0 ? working : 1;
}

}  // namespace pf::dist
