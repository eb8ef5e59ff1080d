// Groups the (token, choice) slots of a routed chunk by expert: a stable counting sort in
// one block, so each expert's tokens stay in token order (the cpu backend's order, which
// makes the two backends' expert GEMMs see the same rows). The slots are few (tokens x k,
// tens of thousands at most) next to the expert GEMMs that follow.
//
// Slots are taken a tile of blockDim at a time. Inside a tile, a slot's rank among its
// expert's slots is the count of the same expert earlier in the tile (a scan of the tile in
// shared memory, no atomics: the order must not depend on timing); the expert's running
// count before the tile gives the rest. The tile's last slot of each expert then moves that
// count on. Finally one thread turns counts into offsets (experts are at most a few hundred).
#include "common.cuh"
#include "kernels.hpp"

namespace pf::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) group_by_expert_kernel(const int32_t* expert, int slots, int experts,
                                                                  int32_t* first_slot, int32_t* slot_of,
                                                                  int32_t* row_of_slot) {
  __shared__ int32_t tile[kThreads];
  // first_slot[e + 1] counts expert e's slots placed so far; row_of_slot holds ranks at first.
  for (int e = threadIdx.x; e <= experts; e += kThreads) first_slot[e] = 0;
  __syncthreads();
  for (int tile0 = 0; tile0 < slots; tile0 += kThreads) {
    const int slot = tile0 + threadIdx.x;
    const int e = slot < slots ? expert[slot] : -1;
    tile[threadIdx.x] = e;
    __syncthreads();
    int before = 0, after = 0;
    if (e >= 0)
      for (int j = 0; j < kThreads; ++j)
        if (tile[j] == e) {
          if (j < static_cast<int>(threadIdx.x)) ++before;
          else if (j > static_cast<int>(threadIdx.x)) ++after;
        }
    const int placed = e >= 0 ? first_slot[e + 1] : 0;
    __syncthreads();  // every count is read before any moves on
    if (e >= 0) {
      row_of_slot[slot] = placed + before;
      if (after == 0) first_slot[e + 1] = placed + before + 1;
    }
    __syncthreads();  // counts moved on, the tile free for the next
  }
  if (threadIdx.x == 0)
    for (int e = 0; e < experts; ++e) first_slot[e + 1] += first_slot[e];
  __syncthreads();
  for (int slot = threadIdx.x; slot < slots; slot += kThreads) {
    const int row = first_slot[expert[slot]] + row_of_slot[slot];
    row_of_slot[slot] = row;
    slot_of[row] = slot;
  }
}

}  // namespace

void group_by_expert(const int32_t* expert, int slots, int experts, int32_t* first_slot, int32_t* slot_of,
                     int32_t* row_of_slot, cudaStream_t stream) {
  if (experts <= 0) return;
  PF_LAUNCH(group_by_expert_kernel, 1, kThreads, 0, stream, expert, slots, experts, first_slot, slot_of, row_of_slot);
}

}  // namespace pf::kernels
