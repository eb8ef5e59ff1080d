// Device helpers shared by the kernels: warp/block reductions and launch geometry.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "device_compat.cuh"

namespace pf::kernels::detail {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // `partial` may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < warps ? partial[lane] : 0.0f;
  return warp_sum(v);
}

// One query row's online-softmax step over a tile of keys in shared memory, for a warp (every
// lane calls it; `visible` >= 1 keys of the tile, the same for the whole warp): scores
// q_row . k_tile[key] (q already scaled by softmax_scale * log2 e, so exp2 is the softmax's
// exp), the running maximum and sum rescaled, and acc_row (value_width floats) += p . v_tile.
// Shared by the latent (MLA) kernel, whose values are its keys' first columns, and the CP
// ring's partial kernel.
template <int kKeyTile>
__device__ __forceinline__ void attend_row_to_key_tile(const float* q_row, const __nv_bfloat16* k_tile, int key_width,
                                                       const __nv_bfloat16* v_tile, int value_width, int value_stride,
                                                       int visible, int lane, float& row_max, float& row_sum,
                                                       float* acc_row) {
  float s[kKeyTile];
  float tile_max = -INFINITY;
#pragma unroll
  for (int key = 0; key < kKeyTile; ++key) {
    float score = -INFINITY;
    if (key < visible) {
      const __nv_bfloat16* k_row = k_tile + key * key_width;
      float part = 0.0f;
      for (int c = lane; c < key_width; c += 32) part += q_row[c] * __bfloat162float(k_row[c]);
      score = warp_sum(part);
    }
    s[key] = score;
    tile_max = fmaxf(tile_max, score);
  }
  // The tile's first key is visible to this row, so the new maximum is finite.
  const float new_max = fmaxf(row_max, tile_max);
  const float alpha = exp2f(row_max - new_max);
  float tile_sum = 0.0f;
#pragma unroll
  for (int key = 0; key < kKeyTile; ++key) {
    s[key] = exp2f(s[key] - new_max);
    tile_sum += s[key];
  }
  row_sum = row_sum * alpha + tile_sum;
  row_max = new_max;
  for (int c = lane; c < value_width; c += 32) {
    float acc = acc_row[c] * alpha;
    for (int key = 0; key < visible; ++key) acc += s[key] * __bfloat162float(v_tile[key * value_stride + c]);
    acc_row[c] = acc;
  }
}

inline unsigned blocks_for(int64_t n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

}  // namespace pf::kernels::detail
