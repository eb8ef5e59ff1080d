// Attention over MLA's latent cache, absorbed (see kernels.hpp): multi-query attention
// whose keys are the cached rows [latent | k_rope] and whose values are their latent part.
//
// A first, plain kernel on CUDA cores, any row width: a block of 4 warps owns 16 query rows
// of one head (4 a warp) and walks the prompt's keys in tiles of 32 staged in shared memory
// as bf16. Per row and tile a warp forms the 32 scores (lanes split the row, a butterfly
// sum gives every lane every score, so each lane can run the online softmax itself), then
// each lane rescales and accumulates its own columns of the row's output in shared memory.
// Causal: a row stops at its own position; a tile past every row of the block is not
// loaded. Every head reads the same rows, so they come from L2 after the first head; a
// tensor-core kernel that shares each tile among the heads is the step after this one.
#include <cmath>

#include "common.cuh"
#include "kernels.hpp"

namespace pf::kernels {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = 4;
constexpr int kBlockRows = kWarps * kRowsPerWarp;
constexpr int kKeyTile = 32;
constexpr int kMaxWidth = 768;  // shared memory 192 bytes a column: 144 KB, within sm_80's and sm_90's opt-in

size_t shared_bytes(int width, int value_width) {
  return sizeof(float) * kBlockRows * (width + value_width) + sizeof(bf16) * kKeyTile * width;
}

__global__ void __launch_bounds__(kThreads) latent_attention_kernel(LatentAttentionArgs a, float scale_log2) {
  PF_DYNAMIC_SHARED(float, smem);
  const int width = a.kv.head_dim, value_width = a.value_width;
  float* q_s = smem;                                                      // [rows][width], times scale * log2(e)
  float* acc_s = q_s + kBlockRows * width;                                // [rows][value_width]
  bf16* k_s = reinterpret_cast<bf16*>(acc_s + kBlockRows * value_width);  // [keys][width]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int head = blockIdx.y;
  // Later query blocks see more keys: launch them first.
  const int m0 = (gridDim.x - 1 - blockIdx.x) * kBlockRows;
  const int block_rows = min(kBlockRows, a.tokens - m0);
  const int64_t last_key = a.pos0 + m0 + block_rows - 1;  // the block's last query sees keys 0 .. last_key
  const int64_t layer_offset = static_cast<int64_t>(a.layer) * a.kv.page_layer_elements();

  for (int i = threadIdx.x; i < kBlockRows * width; i += kThreads) {
    const int row = i / width, c = i % width;
    q_s[i] =
        row < block_rows ? a.q[(m0 + row) * a.q_stride + static_cast<int64_t>(head) * width + c] * scale_log2 : 0.0f;
  }
  for (int i = threadIdx.x; i < kBlockRows * value_width; i += kThreads) acc_s[i] = 0.0f;
  float row_max[kRowsPerWarp], row_sum[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) row_max[r] = -INFINITY, row_sum[r] = 0.0f;

  const int tiles = static_cast<int>(last_key / kKeyTile) + 1;
  for (int j = 0; j < tiles; ++j) {
    const int64_t key0 = static_cast<int64_t>(j) * kKeyTile;
    __syncthreads();  // the previous tile is read (and, the first time, q and acc are set)
    for (int i = threadIdx.x; i < kKeyTile * width; i += kThreads) {
      const int key = i / width, c = i % width;
      const int64_t pos = key0 + key;
      bf16 value = __float2bfloat16_rn(0.0f);
      if (pos <= last_key) {
        const int64_t page = a.kv.page_table[pos / a.kv.page_size];
        value = a.kv.base[page * a.kv.layers * a.kv.page_layer_elements() + layer_offset +
                          (pos % a.kv.page_size) * width + c];
      }
      k_s[i] = value;
    }
    __syncthreads();

#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int row = warp * kRowsPerWarp + r;
      const int64_t query_pos = a.pos0 + m0 + row;
      if (row >= block_rows || key0 > query_pos) continue;  // the same for every lane of the warp
      const int visible = static_cast<int>(min(static_cast<int64_t>(kKeyTile), query_pos - key0 + 1));
      detail::attend_row_to_key_tile<kKeyTile>(q_s + row * width, k_s, width, /*v_tile=*/k_s, value_width,
                                               /*value_stride=*/width, visible, lane, row_max[r], row_sum[r],
                                               acc_s + row * value_width);
    }
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = warp * kRowsPerWarp + r;
    if (row >= block_rows) continue;
    const float inv = 1.0f / row_sum[r];
    bf16* out = a.out + (m0 + row) * a.out_stride + static_cast<int64_t>(head) * value_width;
    for (int c = lane; c < value_width; c += 32) out[c] = __float2bfloat16_rn(acc_s[row * value_width + c] * inv);
  }
}

}  // namespace

int latent_attention_max_width() {
  return kMaxWidth;
}

size_t latent_attention_shared_bytes(int width, int value_width) {
  return shared_bytes(width, value_width);
}

void latent_attention(const LatentAttentionArgs& args, cudaStream_t stream) {
  if (args.tokens <= 0) return;
  // The attribute is per function: raised to what this model's rows need (not to the widest
  // rows', which a GPU with less opt-in memory than sm_80 would refuse for every model).
  static size_t configured = 48 * 1024;
  const size_t bytes = shared_bytes(args.kv.head_dim, args.value_width);
  if (bytes > configured) {
    PF_SET_MAX_DYNAMIC_SHARED(latent_attention_kernel, bytes);
    configured = bytes;
  }
  const dim3 grid((args.tokens + kBlockRows - 1) / kBlockRows, args.heads);
  const float scale_log2 = args.scale * 1.4426950408889634f;
  PF_LAUNCH(latent_attention_kernel, grid, kThreads, bytes, stream, args, scale_log2);
}

}  // namespace pf::kernels
