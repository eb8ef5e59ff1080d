// Appends a chunk's K and V (float rows after RoPE) to the stage's paged bf16 cache; for a
// latent cache (MLA) the one row per token, [normed latent | roped k_rope], and no V.
#include "common.cuh"
#include "kernels.hpp"

namespace pf::kernels {
namespace {

// One thread per (token, kv head, element).
__global__ void kv_append_kernel(PagedKv kv, int layer, int64_t pos0, int count, const float* k, const float* v,
                                 int64_t row_stride) {
  const int width = kv.kv_heads * kv.head_dim;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= static_cast<int64_t>(count) * width) return;
  const int64_t row = item / width;
  const int col = static_cast<int>(item % width);
  const int head = col / kv.head_dim, e = col % kv.head_dim;
  const int64_t pos = pos0 + row;
  const int64_t page = kv.page_table[pos / kv.page_size];
  const int64_t slot = pos % kv.page_size;
  bf16* base = kv.base + (page * kv.layers + layer) * kv.page_layer_elements();
  const int64_t offset = (static_cast<int64_t>(head) * kv.page_size + slot) * kv.head_dim + e;
  base[offset] = __float2bfloat16_rn(k[row * row_stride + col]);
  if (!kv.latent) base[kv.page_layer_elements() / 2 + offset] = __float2bfloat16_rn(v[row * row_stride + col]);
}

}  // namespace

void kv_append(const PagedKv& kv, int layer, int64_t pos0, int count, const float* k, const float* v,
               int64_t row_stride, cudaStream_t stream) {
  const int64_t items = static_cast<int64_t>(count) * kv.kv_heads * kv.head_dim;
  if (items <= 0) return;
  PF_LAUNCH(kv_append_kernel, detail::blocks_for(items, 256), 256, 0, stream, kv, layer, pos0, count, k, v, row_stride);
}

}  // namespace pf::kernels
