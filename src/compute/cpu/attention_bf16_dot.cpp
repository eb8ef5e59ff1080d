// A bf16 pool's attention on vdpbf16ps: attention_tiles.hpp's tiles (query rows across the
// lanes, K and V broadcast, the online softmax as vectors), with both products taking two
// bf16 pairs a lane and instruction instead of one float FMA:
//   S^T[key][rows] = scale * sum_c2 dot2(K[key][2c2..2c2+1], Q^T[c2][rows] as bf16 pairs)
//   O^T[c][rows]  += sum_j2 dot2(V[2j2..2j2+1][c], P^T[j2][rows] as bf16 pairs)
// Q is its bf16 rounding (not pre-scaled: the scale multiplies the float scores, as the cuda
// kernel applies it), K comes straight from the pages (a pair is two neighbouring columns),
// V is repacked once a key block into key pairs, and P is rounded to bf16 as the tiles do on
// a bf16 pool; the sums stay float32. On Zen 4 vdpbf16ps issues as fast as an FMA, twice the
// FLOPs. The code after the pragma is compiled for avx512f/bw/bf16 only, and on its own
// vector type, so no function it instantiates is shared with the other kernels' files.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "compute/cpu/attention.hpp"
#include "compute/cpu/attention_kernels.hpp"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512bf16,avx2,fma")

#include "compute/cpu/attention_tiles.hpp"
#include "compute/cpu/simd_avx512.hpp"

namespace pf::cpu {
namespace {

struct Bf16Dot : Avx512 {};  // its own instantiations of the shared tile templates
using V = Bf16Dot;
constexpr int W = V::kLanes, TW = 2 * W, kJ = V::kKeys, kC = V::kValueColumns;
constexpr int kKeyBlock = tiles::kKeyBlock;

inline __m512 dot2(__m512 acc, __m512i pairs, __m512i broadcast) {
  return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(pairs), reinterpret_cast<__m512bh>(broadcast));
}

// Two float vectors of rows (keys j and j+1) as one vector of bf16 pairs, rounded to nearest
// even: the low half of each lane key j's, the high half key j+1's.
inline __m512i pair_rows(__m512 even, __m512 odd) {
  const __m512i lo = _mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(even)));
  const __m512i hi = _mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(odd)));
  return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
}

inline uint32_t load_pair(const uint16_t* p) {
  uint32_t pair;
  std::memcpy(&pair, p, sizeof pair);
  return pair;
}

// S^T for kJ keys (rows of d bf16 at `keys`), scaled; the block maxima take them in.
template <int kJ>
inline void score_keys(const uint32_t* qp, int rows, const uint16_t* keys, int d, float scale, float* st, __m512& max0,
                       __m512& max1) {
  __m512 acc[kJ][2];
#pragma GCC unroll 16
  for (int j = 0; j < kJ; ++j) acc[j][0] = acc[j][1] = _mm512_setzero_ps();
  for (int c2 = 0; c2 < d / 2; ++c2) {
    const __m512i q0 = _mm512_loadu_si512(qp + static_cast<int64_t>(c2) * rows);
    const __m512i q1 = _mm512_loadu_si512(qp + static_cast<int64_t>(c2) * rows + W);
#pragma GCC unroll 16
    for (int j = 0; j < kJ; ++j) {
      const __m512i k = _mm512_set1_epi32(static_cast<int>(load_pair(keys + j * d + 2 * c2)));
      acc[j][0] = dot2(acc[j][0], q0, k);
      acc[j][1] = dot2(acc[j][1], q1, k);
    }
  }
  const __m512 s = _mm512_set1_ps(scale);
#pragma GCC unroll 16
  for (int j = 0; j < kJ; ++j) {
    const __m512 s0 = _mm512_mul_ps(acc[j][0], s), s1 = _mm512_mul_ps(acc[j][1], s);
    _mm512_storeu_ps(st + j * TW, s0);
    _mm512_storeu_ps(st + j * TW + W, s1);
    max0 = _mm512_max_ps(max0, s0);
    max1 = _mm512_max_ps(max1, s1);
  }
}

template <int kJ>
inline void score_tail(const uint32_t* qp, int rows, const uint16_t* keys, int d, float scale, float* st, int n,
                       __m512& max0, __m512& max1) {
  if constexpr (kJ > 0) {
    if (n == kJ) return score_keys<kJ>(qp, rows, keys, d, scale, st, max0, max1);
    score_tail<kJ - 1>(qp, rows, keys, d, scale, st, n, max0, max1);
  }
}

// O^T[c][tile] = O^T * correction + sum over key pairs; `vp` [pairs][d] (V's key pairs),
// `pp` [pairs][TW] (P's).
inline void accumulate_values(const uint32_t* pp, int pairs, const uint32_t* vp, int d, float* ot, int rows,
                              __m512 corr0, __m512 corr1) {
  for (int c0 = 0; c0 < d; c0 += kC) {
    __m512 acc[kC][2];
#pragma GCC unroll 16
    for (int c = 0; c < kC; ++c) {
      float* o = ot + static_cast<int64_t>(c0 + c) * rows;
      acc[c][0] = _mm512_mul_ps(_mm512_loadu_ps(o), corr0);
      acc[c][1] = _mm512_mul_ps(_mm512_loadu_ps(o + W), corr1);
    }
    for (int j2 = 0; j2 < pairs; ++j2) {
      const __m512i p0 = _mm512_loadu_si512(pp + j2 * TW), p1 = _mm512_loadu_si512(pp + j2 * TW + W);
      const uint32_t* v = vp + static_cast<int64_t>(j2) * d + c0;
#pragma GCC unroll 16
      for (int c = 0; c < kC; ++c) {
        const __m512i b = _mm512_set1_epi32(static_cast<int>(v[c]));
        acc[c][0] = dot2(acc[c][0], p0, b);
        acc[c][1] = dot2(acc[c][1], p1, b);
      }
    }
#pragma GCC unroll 16
    for (int c = 0; c < kC; ++c) {
      float* o = ot + static_cast<int64_t>(c0 + c) * rows;
      _mm512_storeu_ps(o, acc[c][0]);
      _mm512_storeu_ps(o + W, acc[c][1]);
    }
  }
}

// The key block [k0, k0 + n): K's rows copied contiguous ([n, d] bf16), V's repacked into key
// pairs ([ceil(n / 2), d] of (V[2j][c], V[2j+1][c])); an odd block's last pair has a zero.
void stage_key_block(const kv::KvLayerView& kv, int kv_head, int k0, int n, uint16_t* keys, uint32_t* vp) {
  const kv::PagedKvPool& pool = *kv.pool;
  const int d = pool.shape().head_dim, page_size = pool.shape().page_size;
  const auto& pages = *kv.pages;
  for (int j = 0; j < n;) {
    const int pos = k0 + j, page = pages[pos / page_size], at = pos % page_size;
    const int run = std::min(page_size - at, n - j);
    std::memcpy(keys + static_cast<int64_t>(j) * d, pool.key_page_bf16(kv.layer, page, kv_head) + int64_t(at) * d,
                sizeof(uint16_t) * run * d);
    j += run;
  }
  for (int j = 0; j < n; j += 2) {
    const int p0 = k0 + j, p1 = p0 + 1;
    const uint16_t* v0 = pool.value_page_bf16(kv.layer, pages[p0 / page_size], kv_head) + int64_t(p0 % page_size) * d;
    const uint16_t* v1 =
        j + 1 < n ? pool.value_page_bf16(kv.layer, pages[p1 / page_size], kv_head) + int64_t(p1 % page_size) * d
                  : nullptr;
    uint32_t* out = vp + static_cast<int64_t>(j / 2) * d;
    if (v1) {
      for (int c = 0; c < d; c += 16) {  // d is a multiple of 16 (bf16_dot_attention_fits)
        const __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v0 + c)));
        const __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v1 + c)));
        _mm512_storeu_si512(out + c, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
      }
    } else {
      for (int c = 0; c < d; ++c) out[c] = v0[c];
    }
  }
}

}  // namespace

bool bf16_dot_attention_fits(int head_dim) {
  return head_dim % 16 == 0;
}

void attend_query_block_bf16_dot(const QueryBlock& b, TileScratch& scratch) {
  const int d = b.head_dim, g = b.group;
  const int real_rows = b.tokens * g;
  const int rows = (real_rows + TW - 1) / TW * TW;  // padded to whole tiles
  // Slot sizes in floats (4 bytes: one bf16 pair each).
  auto* qp = reinterpret_cast<uint32_t*>(scratch.floats(0, static_cast<size_t>(d / 2) * rows));
  float* ot = scratch.floats(1, static_cast<size_t>(d) * rows);
  float* m = scratch.floats(2, rows);
  float* l = scratch.floats(3, rows);
  float* st = scratch.floats(4, static_cast<size_t>(kKeyBlock) * TW);
  auto* staged = scratch.floats(5, static_cast<size_t>(kKeyBlock) * d);  // K: n*d/2, V pairs: n/2*d
  auto* keys = reinterpret_cast<uint16_t*>(staged);
  auto* vp = reinterpret_cast<uint32_t*>(staged + static_cast<size_t>(kKeyBlock) * d / 2);
  auto* pp = reinterpret_cast<uint32_t*>(scratch.floats(6, static_cast<size_t>(kKeyBlock / 2) * TW));
  int32_t* qpos = scratch.positions(rows);

  // Q^T as bf16 pairs of neighbouring columns (padding rows: zero queries).
  tiles::start_rows<V>(b, rows, qpos, m, l);
  for (int r = 0; r < rows; ++r) {
    const float* src = r < real_rows ? tiles::query_row<V>(b, r, d) : nullptr;
    for (int c = 0; c < d; c += 2)
      qp[static_cast<int64_t>(c / 2) * rows + r] =
          src ? static_cast<uint32_t>(bf16::from_float(src[c])) | (uint32_t{bf16::from_float(src[c + 1])} << 16) : 0u;
  }
  std::fill(ot, ot + static_cast<int64_t>(d) * rows, 0.0f);
  const int last_pos = qpos[rows - 1];

  for (int k0 = 0; k0 <= last_pos; k0 += kKeyBlock) {
    const int nk = std::min(kKeyBlock, last_pos + 1 - k0);
    stage_key_block(*b.kv, b.kv_head, k0, nk, keys, vp);
    for (int t0 = 0; t0 < rows; t0 += TW) {
      const int tile_first = qpos[t0], tile_last = qpos[t0 + TW - 1];
      if (k0 > tile_last) continue;                    // the whole block lies in this tile's future
      const int n = std::min(nk, tile_last + 1 - k0);  // keys some row of the tile sees
      __m512 max0 = _mm512_set1_ps(kMaskedScore), max1 = max0;
      int j = 0;
      for (; j + kJ <= n; j += kJ)
        score_keys<kJ>(qp + t0, rows, keys + static_cast<int64_t>(j) * d, d, b.scale, st + j * TW, max0, max1);
      if (j < n)
        score_tail<kJ - 1>(qp + t0, rows, keys + static_cast<int64_t>(j) * d, d, b.scale, st + j * TW, n - j, max0,
                           max1);
      if (k0 + n - 1 > tile_first) tiles::mask_diagonal<V>(st, n, k0, qpos + t0, max0, max1);
      __m512 corr0, corr1;
      tiles::softmax_block<V>(st, n, max0, max1, m + t0, l + t0, corr0, corr1);
      // P^T as key pairs (an odd count's last pair with a zero: its V pair is zero too).
      const int pairs = (n + 1) / 2;
      for (int j2 = 0; j2 < pairs; ++j2) {
        const int j0 = 2 * j2;
        const __m512 zero = _mm512_setzero_ps();
        const bool whole = j0 + 1 < n;
        _mm512_storeu_si512(
            pp + j2 * TW, pair_rows(_mm512_loadu_ps(st + j0 * TW), whole ? _mm512_loadu_ps(st + (j0 + 1) * TW) : zero));
        _mm512_storeu_si512(pp + j2 * TW + W, pair_rows(_mm512_loadu_ps(st + j0 * TW + W),
                                                        whole ? _mm512_loadu_ps(st + (j0 + 1) * TW + W) : zero));
      }
      accumulate_values(pp, pairs, vp, d, ot + t0, rows, corr0, corr1);
    }
  }
  tiles::write_rows<V>(b, ot, m, l, rows, d);
}

}  // namespace pf::cpu

#pragma GCC pop_options
