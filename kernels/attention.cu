// Chunk attention against a paged KV prefix: FlashAttention-2's scheme on bf16 tensor cores
// (mma.sync m16n8k16, float accumulators), written for this cache layout. The same tiles
// give context parallelism's partials (ring_attention.cu) where the heads fit them: keys
// from one rank's packed shard instead of the pages, each row masked by its count of
// visible keys instead of its position, and float outputs with each row's log-sum-exp.
//
// A block of 4 warps owns 128 query rows of one head, 32 rows (two m16 tiles) a warp, and
// walks the prompt's keys in tiles of 64 (a page holds whole tiles: page_size % 64 == 0).
// Q is converted to bf16 once into shared memory; K and V tiles are staged in shared memory
// by cp.async, two buffers deep, so tile j+1 loads while tile j is multiplied. Per tile:
// S = Q K^T, causal mask (diagonal tiles only), online softmax in float with exp2, then
// O += P V with P taken straight from the S accumulators (the m16n8 C fragments of two
// adjacent key tiles are the m16k16 A fragment of P). All fragments come from shared memory
// by ldmatrix (V transposed on the way), and each K or V fragment feeds both of the warp's
// m-tiles: four MMAs per ldmatrix.x4, which keeps shared-memory bandwidth off the critical
// path. Nothing of size tokens x keys ever leaves registers.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with .bf16): lane = 4 * g + q;
//   A (16x16, row): {A[g][2q..2q+1], A[g+8][2q..], A[g][2q+8..], A[g+8][2q+8..]}
//   B (16x8, col):  {B[2q..2q+1][g], B[2q+8..2q+9][g]}
//   C (16x8):       {C[g][2q], C[g][2q+1], C[g+8][2q], C[g+8][2q+1]}
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "common.cuh"
#include "kernels.hpp"
#include "ptx.cuh"

namespace pf::kernels {
namespace {

constexpr int kBlockM = 128;  // query rows a block: each K/V tile serves 128 queries
constexpr int kBlockN = kAttentionKeyTile;  // keys a tile (attention_shapes.hpp: pages hold whole tiles)
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kMTiles = kBlockM / (16 * kWarps);  // m16 tiles a warp (2: 32 rows)

template <int D>
struct Tiles {
  static constexpr int kLd = D + 8;  // padded row (16 bytes): conflict-free ldmatrix
  static constexpr int kKvElems = kBlockN * kLd;
  static constexpr int kQElems = kBlockM * kLd;
  static constexpr size_t kSmemBytes = (kQElems + 4ull * kKvElems) * sizeof(uint16_t);  // Q, 2 x (K, V)
};

// What one launch attends. Paged (chunk attention): the chunk's `rows` queries at positions
// pos0... against the prompt's pages, causal. Packed (a CP partial): `rows` queries against
// one rank's shard, keys [kv_heads][n][D] then values the same, row r seeing its first
// visible[r] keys (nondecreasing in r: a rank's rows are sorted by position).
struct TileJob {
  const float* q = nullptr;
  int64_t q_stride = 0;
  int rows = 0;
  int heads = 0;
  int kv_heads = 0;
  PagedKv kv;  // paged
  int layer = 0;
  int64_t pos0 = 0;
  const bf16* keys = nullptr;  // packed
  const bf16* values = nullptr;
  int n = 0;
  const int32_t* visible = nullptr;
  float scale_log2 = 0;
  bf16* out = nullptr;         // paged: bf16 rows
  float* out_float = nullptr;  // packed: float rows and each row's log-sum-exp
  float* lse = nullptr;
  int64_t out_stride = 0;
};

// Copies keys [key0, key0 + 64) of one KV head into shared memory (zeros past the last key:
// kv_len in the pages, n in a shard).
template <int D, bool kPacked>
__device__ __forceinline__ void load_tile(uint16_t* k_dst, uint16_t* v_dst, const TileJob& job, int kv_head,
                                          int64_t key0, int64_t kv_len) {
  const bf16 *k_src, *v_src;
  if constexpr (kPacked) {
    k_src = job.keys + (static_cast<int64_t>(kv_head) * job.n + key0) * D;
    v_src = job.values + (static_cast<int64_t>(kv_head) * job.n + key0) * D;
  } else {
    const PagedKv& kv = job.kv;
    const int64_t page = kv.page_table[key0 / kv.page_size];
    const int64_t slot = key0 % kv.page_size;
    k_src = kv.base + (page * kv.layers + job.layer) * kv.page_layer_elements() +
            (static_cast<int64_t>(kv_head) * kv.page_size + slot) * D;
    v_src = k_src + kv.page_layer_elements() / 2;
  }
  constexpr int kChunksPerRow = D / 8;  // 16-byte chunks
  for (int c = threadIdx.x; c < kBlockN * kChunksPerRow; c += kThreads) {
    const int row = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
    const bool valid = key0 + row < kv_len;
    const int64_t src = valid ? static_cast<int64_t>(row) * D + col : 0;
    detail::cp_async_16(k_dst + row * Tiles<D>::kLd + col, k_src + src, valid);
    detail::cp_async_16(v_dst + row * Tiles<D>::kLd + col, v_src + src, valid);
  }
}

template <int D, bool kPacked>
__global__ void __launch_bounds__(kThreads) attention_tiles_kernel(TileJob job) {
  constexpr int kSteps = D / 16;          // k-steps of Q K^T
  constexpr int kKeyTiles = kBlockN / 8;  // n-tiles of S
  constexpr int kOutTiles = D / 8;        // n-tiles of O
  constexpr int kLd = Tiles<D>::kLd;
  PF_DYNAMIC_SHARED(uint16_t, smem);
  uint16_t* q_tile = smem;
  // Buffer b: K at kv_base + 2b tiles, V at kv_base + (2b + 1) tiles (arithmetic, not a
  // pointer array, which would live in local memory).
  uint16_t* kv_base = smem + Tiles<D>::kQElems;
  auto k_tile = [&](int b) { return kv_base + (2 * b) * Tiles<D>::kKvElems; };
  auto v_tile = [&](int b) { return kv_base + (2 * b + 1) * Tiles<D>::kKvElems; };

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, q = lane & 3;
  const int lm = lane >> 3, lr = lane & 7;  // ldmatrix: this lane addresses row lr of matrix lm
  const int head = blockIdx.y;
  const int kv_head = head / (job.heads / job.kv_heads);
  // Later query blocks see more keys: launch them first.
  const int m0 = (gridDim.x - 1 - blockIdx.x) * kBlockM;
  const int warp_row0 = warp * 16 * kMTiles;  // within the block
  const int block_last = min(m0 + kBlockM, job.rows) - 1;
  int64_t kv_len;  // the keys the block's last row sees: the most
  if constexpr (kPacked)
    kv_len = min(job.visible[block_last], job.n);
  else
    kv_len = job.pos0 + job.rows;
  const int tiles =
      static_cast<int>(kPacked ? (kv_len + kBlockN - 1) / kBlockN : (job.pos0 + block_last) / kBlockN + 1);

  if (tiles > 0) {
    load_tile<D, kPacked>(k_tile(0), v_tile(0), job, kv_head, 0, kv_len);
    detail::cp_async_commit();
  }

  // Q (float rows of the chunk) -> bf16 in shared memory; rows past the chunk are zeros.
  for (int c = threadIdx.x; c < kBlockM * (D / 2); c += kThreads) {
    const int row = c / (D / 2), col = (c % (D / 2)) * 2;
    uint32_t packed = 0;
    if (m0 + row < job.rows) {
      const float* src = job.q + static_cast<int64_t>(m0 + row) * job.q_stride + static_cast<int64_t>(head) * D + col;
      packed = detail::pack_bf16(src[0], src[1]);
    }
    memcpy(q_tile + row * kLd + col, &packed, sizeof(packed));
  }
  // Packed: the keys each of this thread's rows (g and g + 8 of each m-tile) sees.
  [[maybe_unused]] int seen[kMTiles][2];
#pragma unroll
  for (int t = 0; t < kMTiles; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = m0 + warp_row0 + t * 16 + h * 8 + g;
      seen[t][h] = kPacked && row < job.rows ? min(job.visible[row], job.n) : 0;
    }
  __syncthreads();

  float o[kMTiles][kOutTiles][4];
#pragma unroll
  for (int t = 0; t < kMTiles; ++t)
#pragma unroll
    for (int n = 0; n < kOutTiles; ++n) o[t][n][0] = o[t][n][1] = o[t][n][2] = o[t][n][3] = 0.0f;
  float row_max[kMTiles][2], row_sum[kMTiles][2];
#pragma unroll
  for (int t = 0; t < kMTiles; ++t) row_max[t][0] = row_max[t][1] = -INFINITY, row_sum[t][0] = row_sum[t][1] = 0.0f;

  // ldmatrix row addresses that do not change across tiles.
  const uint16_t* q_row = q_tile + (warp_row0 + (lm & 1) * 8 + lr) * kLd + (lm >> 1) * 8;  // A: (rows lo/hi, k lo/hi)
  const int k_offset = ((lm >> 1) * 8 + lr) * kLd + (lm & 1) * 8;  // B of S: (keys n / n+1, d lo/hi)
  const int v_offset = ((lm & 1) * 8 + lr) * kLd + (lm >> 1) * 8;  // B of O: (keys lo/hi, d t / t+1)

  for (int j = 0; j < tiles; ++j) {
    if (j + 1 < tiles) {
      load_tile<D, kPacked>(k_tile((j + 1) & 1), v_tile((j + 1) & 1), job, kv_head,
                            static_cast<int64_t>(j + 1) * kBlockN, kv_len);
      detail::cp_async_commit();
      detail::cp_async_wait<1>();
    } else {
      detail::cp_async_wait<0>();
    }
    __syncthreads();
    const uint16_t* ks = k_tile(j & 1);
    const uint16_t* vs = v_tile(j & 1);
    const int64_t key0 = static_cast<int64_t>(j) * kBlockN;

    // S = Q K^T: 32 rows x 64 keys a warp.
    float s[kMTiles][kKeyTiles][4];
#pragma unroll
    for (int t = 0; t < kMTiles; ++t)
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n) s[t][n][0] = s[t][n][1] = s[t][n][2] = s[t][n][3] = 0.0f;
#pragma unroll
    for (int st = 0; st < kSteps; ++st) {
      uint32_t a[kMTiles][4];
#pragma unroll
      for (int t = 0; t < kMTiles; ++t) detail::ldmatrix_x4(a[t], q_row + t * 16 * kLd + st * 16);
#pragma unroll
      for (int n = 0; n < kKeyTiles; n += 2) {
        uint32_t b[4];
        detail::ldmatrix_x4(b, ks + k_offset + n * 8 * kLd + st * 16);
#pragma unroll
        for (int t = 0; t < kMTiles; ++t) detail::mma_bf16_x2(s[t][n], s[t][n + 1], a[t], b);
      }
    }

    // Online softmax, per m-tile and half (rows g, g + 8). Paged: only tiles that reach past
    // the block's first query need the causal mask; there, key - (pos0 + m0) lies in
    // (-64, 128) and the comparison is with the row's index inside the block, in int.
    // Packed: every key at or past the row's visible count is masked.
    const bool needs_mask = kPacked || key0 + kBlockN - 1 > job.pos0 + m0;
    const int mask_base = needs_mask ? static_cast<int>(key0 - (kPacked ? 0 : job.pos0 + m0)) + 2 * q : 0;
#pragma unroll
    for (int t = 0; t < kMTiles; ++t) {
      float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e >> 1;
          float v = s[t][n][e] * job.scale_log2;
          if constexpr (kPacked) {
            if (mask_base + n * 8 + (e & 1) >= seen[t][h]) v = -INFINITY;
          } else {
            if (needs_mask && mask_base + n * 8 + (e & 1) > warp_row0 + t * 16 + h * 8 + g) v = -INFINITY;
          }
          s[t][n][e] = v;
          tile_max[h] = fmaxf(tile_max[h], v);
        }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        // The four lanes of a quad hold one row between them.
        tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
        tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
        // Paged: key 0 is visible to every row, so the running max is finite from the first
        // tile on. Packed: a row may have seen no key yet (its max -inf): exponents against 0
        // then, which give it nothing.
        const float new_max = fmaxf(row_max[t][h], tile_max[h]);
        const float base = kPacked && new_max == -INFINITY ? 0.0f : new_max;
        const float alpha = exp2f(row_max[t][h] - base);
        row_max[t][h] = new_max;
        float part = 0.0f;
#pragma unroll
        for (int n = 0; n < kKeyTiles; ++n) {
          s[t][n][2 * h] = exp2f(s[t][n][2 * h] - base);
          s[t][n][2 * h + 1] = exp2f(s[t][n][2 * h + 1] - base);
          part += s[t][n][2 * h] + s[t][n][2 * h + 1];
        }
        row_sum[t][h] = row_sum[t][h] * alpha + part;  // thread-partial; quads summed at the end
#pragma unroll
        for (int n = 0; n < kOutTiles; ++n) {
          o[t][n][2 * h] *= alpha;
          o[t][n][2 * h + 1] *= alpha;
        }
      }
    }

    // O += P V: keys 16k .. 16k+15 form one k-step.
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      uint32_t p[kMTiles][4];
#pragma unroll
      for (int t = 0; t < kMTiles; ++t) {
        p[t][0] = detail::pack_bf16(s[t][2 * kk][0], s[t][2 * kk][1]);
        p[t][1] = detail::pack_bf16(s[t][2 * kk][2], s[t][2 * kk][3]);
        p[t][2] = detail::pack_bf16(s[t][2 * kk + 1][0], s[t][2 * kk + 1][1]);
        p[t][3] = detail::pack_bf16(s[t][2 * kk + 1][2], s[t][2 * kk + 1][3]);
      }
#pragma unroll
      for (int n = 0; n < kOutTiles; n += 2) {
        uint32_t b[4];
        detail::ldmatrix_x4_trans(b, vs + v_offset + kk * 16 * kLd + n * 8);
#pragma unroll
        for (int t = 0; t < kMTiles; ++t) detail::mma_bf16_x2(o[t][n], o[t][n + 1], p[t], b);
      }
    }
    __syncthreads();  // the next iteration refills this buffer
  }

#pragma unroll
  for (int t = 0; t < kMTiles; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float sum = row_sum[t][h];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int row = m0 + warp_row0 + t * 16 + h * 8 + g;
      if (row >= job.rows) continue;
      if constexpr (kPacked) {
        const bool any = sum > 0.0f;  // a row that saw no key: zeros and -inf, which merge as nothing
        const float inv = any ? 1.0f / sum : 0.0f;
        float* out =
            job.out_float + static_cast<int64_t>(row) * job.out_stride + static_cast<int64_t>(head) * D + 2 * q;
#pragma unroll
        for (int n = 0; n < kOutTiles; ++n) {  // (two stores: a partial's rows may start at odd floats)
          out[n * 8] = o[t][n][2 * h] * inv;
          out[n * 8 + 1] = o[t][n][2 * h + 1] * inv;
        }
        // log(sum e^s) with s natural: the running max and sum are in base 2.
        if (q == 0)
          job.lse[static_cast<int64_t>(row) * job.heads + head] =
              any ? (row_max[t][h] + log2f(sum)) * 0.6931471805599453f : -INFINITY;
      } else {
        const float inv = 1.0f / sum;
        bf16* out = job.out + static_cast<int64_t>(row) * job.out_stride + static_cast<int64_t>(head) * D + 2 * q;
#pragma unroll
        for (int n = 0; n < kOutTiles; ++n)
          *reinterpret_cast<__nv_bfloat162*>(out + n * 8) =
              __floats2bfloat162_rn(o[t][n][2 * h] * inv, o[t][n][2 * h + 1] * inv);
      }
    }
}

template <int D, bool kPacked>
void launch(const TileJob& job, cudaStream_t stream) {
  constexpr size_t smem = Tiles<D>::kSmemBytes;
  constexpr auto kernel = attention_tiles_kernel<D, kPacked>;
  static bool configured = false;  // the attribute is per function, set once
  if (!configured) {
    PF_SET_MAX_DYNAMIC_SHARED(kernel, smem);
    configured = true;
  }
  const dim3 grid((job.rows + kBlockM - 1) / kBlockM, job.heads);
  PF_LAUNCH(kernel, grid, kThreads, smem, stream, job);
}

template <bool kPacked>
bool launch_for_width(int d, const TileJob& job, cudaStream_t stream) {
  switch (d) {
    case 128:
      launch<128, kPacked>(job, stream);
      return true;
    case 64:
      launch<64, kPacked>(job, stream);
      return true;
    case 48:
      launch<48, kPacked>(job, stream);
      return true;
    case 32:
      launch<32, kPacked>(job, stream);
      return true;
    default:
      return false;
  }
}

}  // namespace

void chunk_attention(const AttentionArgs& args, cudaStream_t stream) {
  if (args.tokens <= 0) return;
  TileJob job;
  job.q = args.q;
  job.q_stride = args.q_stride;
  job.rows = args.tokens;
  job.heads = args.heads;
  job.kv_heads = args.kv.kv_heads;
  job.kv = args.kv;
  job.layer = args.layer;
  job.pos0 = args.pos0;
  job.scale_log2 = 1.4426950408889634f / sqrtf(static_cast<float>(args.kv.head_dim));
  job.out = args.out;
  job.out_stride = args.out_stride;
  if (!launch_for_width<false>(args.kv.head_dim, job, stream)) {
    // attention_supports() is checked at set-up: reaching this is a bug
    std::fprintf(stderr, "fatal: chunk_attention called with unsupported head_dim %d\n", args.kv.head_dim);
    std::abort();
  }
}

bool partial_attention_on_tiles(const PartialAttentionArgs& a, cudaStream_t stream) {
  const int d = a.key_width;
  // Grouped-query shards only: values rows of their own, as wide as the keys; both 16-byte
  // aligned for cp.async (rows of 32-128 bf16 keep every row so).
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (a.value_width != d || a.value_row_stride != d || !aligned(a.keys) || !aligned(a.values)) return false;
  if (d != 32 && d != 48 && d != 64 && d != 128) return false;
  if (a.rows <= 0) return true;
  TileJob job;
  job.q = a.q;
  job.q_stride = a.q_stride;
  job.rows = a.rows;
  job.heads = a.heads;
  job.kv_heads = a.kv_heads;
  job.keys = a.keys;
  job.values = a.values;
  job.n = a.n;
  job.visible = a.visible;
  job.scale_log2 = a.scale * 1.4426950408889634f;
  job.out_float = a.out;
  job.lse = a.lse;
  job.out_stride = a.out_stride;
  return launch_for_width<true>(d, job, stream);
}

}  // namespace pf::kernels
