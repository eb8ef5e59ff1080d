// Chunk attention against a paged KV prefix: FlashAttention-2's scheme on bf16 tensor cores
// (mma.sync m16n8k16, float accumulators), written for this cache layout.
//
// A block of 8 warps owns 128 query rows of one head (16 rows a warp) and walks the prompt's
// keys in tiles of 64 (a page holds whole tiles: page_size % 64 == 0). K and V tiles are
// staged in shared memory by cp.async, two buffers deep, so tile j+1 loads while tile j is
// multiplied. Per tile: S = Q K^T (Q held in registers as bf16 fragments, converted from the
// float activations once), causal mask, online softmax in float with exp2, then O += P V with
// P re-used straight from the S accumulators (the m16n8 C fragment of two adjacent key tiles
// is the m16k16 A fragment of P). K and V fragments come from shared memory by ldmatrix
// (V transposed on the way). Nothing of size tokens x keys ever leaves registers.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with .bf16): lane = 4 * g + q;
//   A (16x16, row): {A[g][2q..2q+1], A[g+8][2q..], A[g][2q+8..], A[g+8][2q+8..]}
//   B (16x8, col):  {B[2q..2q+1][g], B[2q+8..2q+9][g]}
//   C (16x8):       {C[g][2q], C[g][2q+1], C[g+8][2q], C[g+8][2q+1]}
#include <cfloat>

#include <cstdio>
#include <cstdlib>

#include "common.cuh"
#include "kernels.hpp"
#include "ptx.cuh"

namespace pf::kernels {
namespace {

constexpr int kBlockM = 128;  // query rows a block: each K/V tile serves 128 queries
constexpr int kBlockN = 64;   // keys a tile
constexpr int kWarps = 8;     // 16 query rows a warp
constexpr int kThreads = kWarps * 32;

template <int D>
struct Tiles {
  static constexpr int kLd = D + 8;  // padded row (16 bytes): conflict-free fragment loads
  static constexpr int kTileElems = kBlockN * kLd;
  static constexpr size_t kSmemBytes = 4ull * kTileElems * sizeof(uint16_t);  // K and V, two buffers each
};

// Copies keys [key0, key0 + 64) of one KV head into shared memory (zeros past kv_len).
template <int D>
__device__ __forceinline__ void load_tile(uint16_t* k_dst, uint16_t* v_dst, const PagedKv& kv, int layer, int kv_head,
                                          int64_t key0, int64_t kv_len) {
  const int64_t page = kv.page_table[key0 / kv.page_size];
  const int64_t slot = key0 % kv.page_size;
  const bf16* k_src = kv.base + (page * kv.layers + layer) * kv.page_layer_elements() +
                      (static_cast<int64_t>(kv_head) * kv.page_size + slot) * D;
  const bf16* v_src = k_src + kv.page_layer_elements() / 2;
  constexpr int kChunksPerRow = D / 8;  // 16-byte chunks
  for (int c = threadIdx.x; c < kBlockN * kChunksPerRow; c += kThreads) {
    const int row = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
    const bool valid = key0 + row < kv_len;
    const int64_t src = valid ? static_cast<int64_t>(row) * D + col : 0;
    detail::cp_async_16(k_dst + row * Tiles<D>::kLd + col, k_src + src, valid);
    detail::cp_async_16(v_dst + row * Tiles<D>::kLd + col, v_src + src, valid);
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads) chunk_attention_kernel(AttentionArgs args, float scale_log2) {
  constexpr int kSteps = D / 16;   // k-steps of Q K^T
  constexpr int kKeyTiles = kBlockN / 8;  // n-tiles of S
  constexpr int kOutTiles = D / 8;  // n-tiles of O
  constexpr int kLd = Tiles<D>::kLd;
  PF_DYNAMIC_SHARED(uint16_t, smem);
  // Buffer b: K at smem + 2b tiles, V at smem + (2b + 1) tiles (indexed by arithmetic, not
  // a pointer array, which would live in local memory).
  auto k_tile = [&](int b) { return smem + (2 * b) * Tiles<D>::kTileElems; };
  auto v_tile = [&](int b) { return smem + (2 * b + 1) * Tiles<D>::kTileElems; };

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, q = lane & 3;
  const int head = blockIdx.y;
  const int kv_head = head / (args.heads / args.kv.kv_heads);
  // Later query blocks see more keys: launch them first.
  const int m0 = (gridDim.x - 1 - blockIdx.x) * kBlockM;
  const int row_a = m0 + warp * 16 + g, row_b = row_a + 8;  // this thread's two query rows
  const int64_t kv_len = args.pos0 + args.tokens;
  const int64_t qpos_a = args.pos0 + row_a, qpos_b = args.pos0 + row_b;
  const int64_t block_last_q = args.pos0 + min(m0 + kBlockM, args.tokens) - 1;
  const int tiles = static_cast<int>(block_last_q / kBlockN) + 1;

  load_tile<D>(k_tile(0), v_tile(0), args.kv, args.layer, kv_head, 0, kv_len);
  detail::cp_async_commit();

  // Q fragments (bf16) for the warp's 16 rows; rows past the chunk read as zeros.
  uint32_t qf[kSteps][4];
  {
    const float* qa = args.q + static_cast<int64_t>(row_a) * args.q_stride + static_cast<int64_t>(head) * D;
    const float* qb = args.q + static_cast<int64_t>(row_b) * args.q_stride + static_cast<int64_t>(head) * D;
    const bool va = row_a < args.tokens, vb = row_b < args.tokens;
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int c0 = s * 16 + 2 * q, c1 = c0 + 8;
      qf[s][0] = va ? detail::pack_bf16(qa[c0], qa[c0 + 1]) : 0u;
      qf[s][1] = vb ? detail::pack_bf16(qb[c0], qb[c0 + 1]) : 0u;
      qf[s][2] = va ? detail::pack_bf16(qa[c1], qa[c1 + 1]) : 0u;
      qf[s][3] = vb ? detail::pack_bf16(qb[c1], qb[c1 + 1]) : 0u;
    }
  }

  float o[kOutTiles][4];
#pragma unroll
  for (int t = 0; t < kOutTiles; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.0f;
  float max_a = -INFINITY, max_b = -INFINITY, sum_a = 0.0f, sum_b = 0.0f;

  for (int j = 0; j < tiles; ++j) {
    if (j + 1 < tiles) {
      load_tile<D>(k_tile((j + 1) & 1), v_tile((j + 1) & 1), args.kv, args.layer, kv_head,
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

    // S = Q K^T for 16 rows x 64 keys. One ldmatrix.x4 gives the B fragments of two key
    // tiles at one k-step: matrices (keys n, d lo), (keys n, d hi), (keys n+1, d lo), (n+1, hi).
    float s[kKeyTiles][4];
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
    {
      const int m = lane >> 3, r = lane & 7;  // this lane addresses row r of matrix m
      const uint16_t* k_row = ks + ((m >> 1) * 8 + r) * kLd + (m & 1) * 8;
#pragma unroll
      for (int st = 0; st < kSteps; ++st) {
#pragma unroll
        for (int n = 0; n < kKeyTiles; n += 2) {
          uint32_t b[4];
          detail::ldmatrix_x4(b, k_row + n * 8 * kLd + st * 16);
          detail::mma_bf16(s[n], qf[st], b[0], b[1]);
          detail::mma_bf16(s[n + 1], qf[st], b[2], b[3]);
        }
      }
    }

    // Scale to log2 units; mask keys after each row's position (only the diagonal tiles).
    const bool needs_mask = key0 + kBlockN - 1 > args.pos0 + m0;
    float tile_max_a = -INFINITY, tile_max_b = -INFINITY;
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t key = key0 + n * 8 + 2 * q + (e & 1);
        float v = s[n][e] * scale_log2;
        if (needs_mask && key > (e < 2 ? qpos_a : qpos_b)) v = -INFINITY;
        s[n][e] = v;
      }
      tile_max_a = fmaxf(tile_max_a, fmaxf(s[n][0], s[n][1]));
      tile_max_b = fmaxf(tile_max_b, fmaxf(s[n][2], s[n][3]));
    }
    // The four lanes of a quad hold one row between them.
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
      tile_max_a = fmaxf(tile_max_a, __shfl_xor_sync(0xffffffffu, tile_max_a, off));
      tile_max_b = fmaxf(tile_max_b, __shfl_xor_sync(0xffffffffu, tile_max_b, off));
    }
    // Key 0 is visible to every row, so the running max is finite from the first tile on.
    const float new_max_a = fmaxf(max_a, tile_max_a), new_max_b = fmaxf(max_b, tile_max_b);
    const float alpha_a = exp2f(max_a - new_max_a), alpha_b = exp2f(max_b - new_max_b);
    max_a = new_max_a;
    max_b = new_max_b;
    float part_a = 0.0f, part_b = 0.0f;
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n) {
      s[n][0] = exp2f(s[n][0] - max_a);
      s[n][1] = exp2f(s[n][1] - max_a);
      s[n][2] = exp2f(s[n][2] - max_b);
      s[n][3] = exp2f(s[n][3] - max_b);
      part_a += s[n][0] + s[n][1];
      part_b += s[n][2] + s[n][3];
    }
    sum_a = sum_a * alpha_a + part_a;  // thread-partial; the quad's parts are summed at the end
    sum_b = sum_b * alpha_b + part_b;
#pragma unroll
    for (int t = 0; t < kOutTiles; ++t) {
      o[t][0] *= alpha_a;
      o[t][1] *= alpha_a;
      o[t][2] *= alpha_b;
      o[t][3] *= alpha_b;
    }

    // O += P V: keys 16k .. 16k+15 form one k-step; P's A fragment comes from S tiles 2k, 2k+1.
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      const uint32_t p[4] = {detail::pack_bf16(s[2 * kk][0], s[2 * kk][1]), detail::pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                             detail::pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             detail::pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
      // ldmatrix.x4.trans: matrices (keys lo, d t), (keys hi, d t), (keys lo, d t+1), (keys hi, d t+1)
      // give the B fragments of output tiles t and t+1.
      const int m = lane >> 3, r = lane & 7;
      const uint16_t* v_row = vs + (kk * 16 + (m & 1) * 8 + r) * kLd + (m >> 1) * 8;
#pragma unroll
      for (int t = 0; t < kOutTiles; t += 2) {
        uint32_t b[4];
        detail::ldmatrix_x4_trans(b, v_row + t * 8);
        detail::mma_bf16(o[t], p, b[0], b[1]);
        detail::mma_bf16(o[t + 1], p, b[2], b[3]);
      }
    }
    __syncthreads();  // the next iteration refills this buffer
  }

#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    sum_a += __shfl_xor_sync(0xffffffffu, sum_a, off);
    sum_b += __shfl_xor_sync(0xffffffffu, sum_b, off);
  }
  const float inv_a = 1.0f / sum_a, inv_b = 1.0f / sum_b;
  bf16* out_a = args.out + static_cast<int64_t>(row_a) * args.out_stride + static_cast<int64_t>(head) * D + 2 * q;
  bf16* out_b = args.out + static_cast<int64_t>(row_b) * args.out_stride + static_cast<int64_t>(head) * D + 2 * q;
#pragma unroll
  for (int t = 0; t < kOutTiles; ++t) {
    if (row_a < args.tokens)
      *reinterpret_cast<__nv_bfloat162*>(out_a + t * 8) = __floats2bfloat162_rn(o[t][0] * inv_a, o[t][1] * inv_a);
    if (row_b < args.tokens)
      *reinterpret_cast<__nv_bfloat162*>(out_b + t * 8) = __floats2bfloat162_rn(o[t][2] * inv_b, o[t][3] * inv_b);
  }
}

template <int D>
void launch(const AttentionArgs& args, cudaStream_t stream) {
  constexpr size_t smem = Tiles<D>::kSmemBytes;
  static bool configured = false;  // the attribute is per function, set once
  if (!configured) {
    PF_SET_MAX_DYNAMIC_SHARED(chunk_attention_kernel<D>, smem);
    configured = true;
  }
  const dim3 grid((args.tokens + kBlockM - 1) / kBlockM, args.heads);
  const float scale_log2 = 1.4426950408889634f / sqrtf(static_cast<float>(D));
  PF_LAUNCH(chunk_attention_kernel<D>, grid, kThreads, smem, stream, args, scale_log2);
}

}  // namespace

bool attention_supports(int head_dim, int page_size) {
  const bool dim_ok = head_dim == 32 || head_dim == 48 || head_dim == 64 || head_dim == 128;
  return dim_ok && page_size > 0 && page_size % kBlockN == 0;
}

void chunk_attention(const AttentionArgs& args, cudaStream_t stream) {
  if (args.tokens <= 0) return;
  switch (args.kv.head_dim) {
    case 128: launch<128>(args, stream); break;
    case 64: launch<64>(args, stream); break;
    case 48: launch<48>(args, stream); break;
    case 32: launch<32>(args, stream); break;
    default:  // attention_supports() is checked at set-up: reaching this is a bug
      std::fprintf(stderr, "fatal: chunk_attention called with unsupported head_dim %d\n", args.kv.head_dim);
      std::abort();
  }
}

}  // namespace pf::kernels
