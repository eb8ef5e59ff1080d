// Context parallelism's attention pieces (see kernels.hpp): the partial attention of a CP
// rank's queries over one rank's packed shard, returning each row's log-sum-exp, and the
// exact merge of two partials by their log-sum-exps.
//
// partial_attention runs grouped-query shards on attention.cu's tensor-core tiles (keys from
// the shard, each row's visible count as its mask, the log-sum-exp written out). Other widths
// (MLA's latent rows) take a plain kernel on CUDA cores, latent_attention.cu's scheme with the
// mask by visible counts instead of positions: a block of 4 warps owns 16 query rows of one
// head (4 a warp) and walks the shard's keys in tiles of 32 staged in shared memory as bf16
// (keys and values each). Per row and tile a warp forms the 32 scores (lanes split the row,
// a butterfly sum gives every lane every score, so each lane runs the online softmax
// itself), then each lane rescales and accumulates its own columns of the row's output.
// Rows see a prefix of the shard (a rank's keys are sorted by position), so a tile past
// every row of the block is not loaded.
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
constexpr int kMaxWidth = 384;  // key or value columns: 96 KiB of shared memory, within sm_86's opt-in (99 KiB)
constexpr size_t kDefaultShared = 48 * 1024;  // what a launch gets without opting in
// MLA's partials (latent rows as keys, their kv_lora columns as values: DeepSeek-V3's 576 and
// 512 need 136 KiB) opt in up to latent_attention.cu's own budget, within sm_80's and sm_90's.
constexpr size_t kLatentShared = 144 * 1024;

size_t shared_bytes(int key_width, int value_width) {
  return sizeof(float) * kBlockRows * (key_width + value_width) + sizeof(bf16) * kKeyTile * (key_width + value_width);
}

__global__ void __launch_bounds__(kThreads) partial_attention_kernel(PartialAttentionArgs a, float scale_log2) {
  PF_DYNAMIC_SHARED(float, smem);
  const int kw = a.key_width, vw = a.value_width;
  float* q_s = smem;                                             // [rows][kw], times scale * log2(e)
  float* acc_s = q_s + kBlockRows * kw;                          // [rows][vw]
  bf16* k_s = reinterpret_cast<bf16*>(acc_s + kBlockRows * vw);  // [keys][kw]
  bf16* v_s = k_s + kKeyTile * kw;                               // [keys][vw]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int head = blockIdx.y, kv_head = head / (a.heads / a.kv_heads);
  const int m0 = blockIdx.x * kBlockRows;
  const int block_rows = min(kBlockRows, a.rows - m0);
  const int seen = min(a.visible[m0 + block_rows - 1], a.n);  // the keys the block's last row sees: the most
  const bf16* keys = a.keys + static_cast<int64_t>(kv_head) * a.n * kw;
  const bf16* values = a.values + static_cast<int64_t>(kv_head) * a.n * a.value_row_stride;

  for (int i = threadIdx.x; i < kBlockRows * kw; i += kThreads) {
    const int row = i / kw, c = i % kw;
    q_s[i] = row < block_rows ? a.q[(m0 + row) * a.q_stride + static_cast<int64_t>(head) * kw + c] * scale_log2 : 0.0f;
  }
  for (int i = threadIdx.x; i < kBlockRows * vw; i += kThreads) acc_s[i] = 0.0f;
  float row_max[kRowsPerWarp], row_sum[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) row_max[r] = -INFINITY, row_sum[r] = 0.0f;

  for (int key0 = 0; key0 < seen; key0 += kKeyTile) {
    __syncthreads();  // the previous tile is read (and, the first time, q and acc are set)
    for (int i = threadIdx.x; i < kKeyTile * kw; i += kThreads) {
      const int key = i / kw, c = i % kw;
      k_s[i] = key0 + key < seen ? keys[static_cast<int64_t>(key0 + key) * kw + c] : __float2bfloat16_rn(0.0f);
    }
    for (int i = threadIdx.x; i < kKeyTile * vw; i += kThreads) {
      const int key = i / vw, c = i % vw;
      v_s[i] = key0 + key < seen ? values[static_cast<int64_t>(key0 + key) * a.value_row_stride + c]
                                 : __float2bfloat16_rn(0.0f);
    }
    __syncthreads();

#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int row = warp * kRowsPerWarp + r;
      if (row >= block_rows) continue;
      const int visible = min(min(a.visible[m0 + row], a.n) - key0, kKeyTile);
      if (visible <= 0) continue;  // the same for every lane of the warp
      detail::attend_row_to_key_tile<kKeyTile>(q_s + row * kw, k_s, kw, v_s, vw, /*value_stride=*/vw, visible, lane,
                                               row_max[r], row_sum[r], acc_s + row * vw);
    }
  }

  __syncthreads();  // (a row no tile reached still reads its zeroed accumulator)
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = warp * kRowsPerWarp + r;
    if (row >= block_rows) continue;
    const bool any = row_sum[r] > 0.0f;
    const float inv = any ? 1.0f / row_sum[r] : 0.0f;
    float* out = a.out + (m0 + row) * a.out_stride + static_cast<int64_t>(head) * vw;
    for (int c = lane; c < vw; c += 32) out[c] = acc_s[row * vw + c] * inv;
    // log(sum e^s) with s natural: the running max and sum are in base 2.
    if (lane == 0)
      a.lse[static_cast<int64_t>(m0 + row) * a.heads + head] =
          any ? (row_max[r] + log2f(row_sum[r])) * 0.6931471805599453f : -INFINITY;
  }
}

// One thread per (row, head): L = log(e^L1 + e^L2), O = e^(L1 - L) O1 + e^(L2 - L) O2.
__global__ void merge_partial_kernel(float* out, float* lse, const float* part, int64_t part_stride,
                                     const float* part_lse, int rows, int heads, int head_width) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= static_cast<int64_t>(rows) * heads) return;
  const int64_t row = index / heads;
  const int head = static_cast<int>(index % heads);
  const float l2 = part_lse[index];
  if (l2 == -INFINITY) return;  // the partial saw no key
  float* o = out + row * heads * head_width + static_cast<int64_t>(head) * head_width;
  const float* p = part + row * part_stride + static_cast<int64_t>(head) * head_width;
  const float l1 = lse[index];
  if (l1 == -INFINITY) {
    for (int c = 0; c < head_width; ++c) o[c] = p[c];
    lse[index] = l2;
    return;
  }
  const float top = fmaxf(l1, l2);
  const float w1 = expf(l1 - top), w2 = expf(l2 - top), total = w1 + w2;
  const float x = w1 / total, y = w2 / total;
  for (int c = 0; c < head_width; ++c) o[c] = x * o[c] + y * p[c];
  lse[index] = top + logf(total);
}

// One thread per packed element: i over [K or V][kv_heads][rows][head_dim].
__global__ void pack_kv_rows_kernel(PagedKv kv, int layer, int64_t rows, bf16* shard) {
  const int64_t half = static_cast<int64_t>(kv.kv_heads) * rows * kv.head_dim;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= (kv.latent ? 1 : 2) * half) return;
  const bool value = i >= half;
  const int64_t in_half = value ? i - half : i;
  const int64_t head = in_half / (rows * kv.head_dim), row = (in_half / kv.head_dim) % rows, c = in_half % kv.head_dim;
  const int64_t page = kv.page_table[row / kv.page_size], slot = row % kv.page_size;
  const int64_t at = (page * kv.layers + layer) * kv.page_layer_elements() +
                     (value ? kv.page_layer_elements() / 2 : 0) + (head * kv.page_size + slot) * kv.head_dim + c;
  shard[i] = kv.base[at];
}

}  // namespace

void pack_kv_rows(const PagedKv& kv, int layer, int64_t rows, bf16* shard, cudaStream_t stream) {
  const int64_t n = (kv.latent ? 1 : 2) * static_cast<int64_t>(kv.kv_heads) * rows * kv.head_dim;
  if (n <= 0) return;
  PF_LAUNCH(pack_kv_rows_kernel, detail::blocks_for(n, 256), 256, 0, stream, kv, layer, rows, shard);
}

int partial_attention_max_width() {
  return kMaxWidth;
}

bool partial_attention_fits(int key_width, int value_width) {
  return key_width > 0 && value_width > 0 && shared_bytes(key_width, value_width) <= kLatentShared;
}

size_t partial_attention_shared_bytes(int key_width, int value_width) {
  return shared_bytes(key_width, value_width);
}

void partial_attention(const PartialAttentionArgs& args, cudaStream_t stream) {
  if (args.rows <= 0) return;
  if (partial_attention_on_tiles(args, stream)) return;  // grouped-query heads: tensor cores
  // Head dims up to 128 need 32 KiB; only wider rows opt in, to what they need (an attribute
  // above the device's limit fails, and the launch's check reports it).
  const size_t bytes = shared_bytes(args.key_width, args.value_width);
  if (bytes > kDefaultShared) PF_SET_MAX_DYNAMIC_SHARED(partial_attention_kernel, bytes);
  const dim3 grid((args.rows + kBlockRows - 1) / kBlockRows, args.heads);
  const float scale_log2 = args.scale * 1.4426950408889634f;
  PF_LAUNCH(partial_attention_kernel, grid, kThreads, bytes, stream, args, scale_log2);
}

void merge_partial(float* out, float* lse, const float* part, int64_t part_stride, const float* part_lse, int rows,
                   int heads, int head_width, cudaStream_t stream) {
  const int64_t threads = static_cast<int64_t>(rows) * heads;
  if (threads <= 0) return;
  constexpr int kBlock = 256;
  PF_LAUNCH(merge_partial_kernel, static_cast<unsigned>((threads + kBlock - 1) / kBlock), kBlock, 0, stream, out, lse,
            part, part_stride, part_lse, rows, heads, head_width);
}

}  // namespace pf::kernels
