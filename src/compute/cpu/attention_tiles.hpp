// The attention kernel's body, written once over a vector type V (simd_avx512.hpp,
// simd_avx2.hpp) and compiled once per ISA. Included only by attention_avx512.cpp and
// attention_avx2.cpp, under their target pragmas: every function here is a template on V.
//
// Layout: the block's query rows (token, head-in-group) lie across vector lanes. Q is packed
// transposed, Q^T [head_dim][rows], pre-scaled; the output accumulates transposed too, O^T.
// Then every product is a broadcast of one K or V element times a vector of rows:
//   S^T[key][rows]  = sum_c K[key][c]   * Q^T[c][rows]
//   O^T[c][rows]   += sum_key V[key][c] * P^T[key][rows]
// so K and V are read straight from their [page_size, head_dim] pages, never transposed, and
// the online softmax's row max and row sum are vectors (no horizontal reductions at all).
//
// Blocking: for each key block (kKeyBlock keys, L1/L2-resident) every tile of 2 vectors of rows
// computes its S^T block into L1, masks the causal diagonal (skipping what no row of the tile
// can see), updates its softmax state and adds P.V into its O^T columns. The GQA group's heads
// share each K/V load, since its rows sit in the same tiles.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>

#include "compute/cpu/attention.hpp"
#include "compute/cpu/attention_kernels.hpp"
#include "io/bf16.hpp"

namespace pf::cpu::tiles {

constexpr int kKeyBlock = 128;  // keys per block: S^T (128 x 2 vectors) in L1, the K/V block (64 KB at d 64) in L2

// S^T[j][0..2W) for the kJ keys at `keys` (rows of head_dim): registers kJ x 2 vectors. The
// block's running max per row (max0, max1) takes them in while they are in registers.
// Never inlined: inside attend_query_block GCC 12 kept the two Q vectors on the stack and
// reloaded them for every FMA (the AVX-512 kernel at 57 % of the FMA peak instead of 80 %).
template <class V, int kJ>
__attribute__((noinline)) void score_keys(const float* qt, int rows, const float* keys, int d, float* st,
                                          typename V::reg& max0, typename V::reg& max1) {
  constexpr int W = V::kLanes;
  typename V::reg acc[kJ][2];
#pragma GCC unroll 16
  for (int j = 0; j < kJ; ++j) acc[j][0] = acc[j][1] = V::zero();
  // kSteps head-dim steps an iteration (AVX2 on Zen 3: two gave +3 % in alternating runs); d
  // is a multiple of it (the kernels take even head sizes only).
  constexpr int kSteps = V::kScoreStepsPerIteration;
  for (int c0 = 0; c0 < d; c0 += kSteps) {
#pragma GCC unroll 4
    for (int c = c0; c < c0 + kSteps; ++c) {
      auto q0 = V::load(qt + static_cast<int64_t>(c) * rows), q1 = V::load(qt + static_cast<int64_t>(c) * rows + W);
      asm("" : "+v"(q0), "+v"(q1));  // in registers, not folded into each key's FMAs (as in P.V)
#pragma GCC unroll 16
      for (int j = 0; j < kJ; ++j) {
        const auto k = V::set1(keys[j * d + c]);
        acc[j][0] = V::fma(k, q0, acc[j][0]);
        acc[j][1] = V::fma(k, q1, acc[j][1]);
      }
    }
  }
#pragma GCC unroll 16
  for (int j = 0; j < kJ; ++j) {
    V::store(st + j * 2 * W, acc[j][0]);
    V::store(st + j * 2 * W + W, acc[j][1]);
    max0 = V::max(max0, acc[j][0]);
    max1 = V::max(max1, acc[j][1]);
  }
}

// The remainder of a key block (fewer than V::kKeys keys), one instantiation per count.
template <class V, int kJ>
inline void score_tail(const float* qt, int rows, const float* keys, int d, float* st, int n, typename V::reg& max0,
                       typename V::reg& max1) {
  if constexpr (kJ > 0) {
    if (n == kJ) return score_keys<V, kJ>(qt, rows, keys, d, st, max0, max1);
    score_tail<V, kJ - 1>(qt, rows, keys, d, st, n, max0, max1);
  }
}

// A key block's K and V rows: runs of rows contiguous in memory, [begin[r], begin[r + 1]) of
// the block at keys[r] and values[r] (one run where the block lies in one page, is staged or
// packed; one a page where it crosses pages of a float pool, read in place).
constexpr int kMaxRuns = 5;  // a 128-key block over pages of at least 32 keys
struct KeyRuns {
  int runs = 0;
  int begin[kMaxRuns + 1] = {};
  const float* keys[kMaxRuns] = {};
  const float* values[kMaxRuns] = {};
};

// O^T[c0..c0+kC)[tile] = O^T * correction + sum_j V[j][c] P^T[j] over the first n keys of the
// runs: registers kC x 2 vectors.
template <class V, int kC>
inline void accumulate_columns(const float* pt, int n, const KeyRuns& kv, int d, int c0, float* ot, int rows,
                               typename V::reg corr0, typename V::reg corr1) {
  constexpr int W = V::kLanes;
  typename V::reg acc[kC][2];
#pragma GCC unroll 16
  for (int c = 0; c < kC; ++c) {
    float* o = ot + static_cast<int64_t>(c0 + c) * rows;
    acc[c][0] = V::mul(V::load(o), corr0);
    acc[c][1] = V::mul(V::load(o + W), corr1);
  }
  for (int r = 0; r < kv.runs && kv.begin[r] < n; ++r) {
    const int first = kv.begin[r], last = std::min(n, kv.begin[r + 1]);
    for (int j = first; j < last; ++j) {
      auto p0 = V::load(pt + j * 2 * W), p1 = V::load(pt + j * 2 * W + W);
      // Held in registers: GCC would fold the two loads into each column's FMAs instead (2 kC
      // loads a key where 2 do), which on AVX2 left this loop load-bound (Zen 3: 57 % of the
      // FMA peak).
      asm("" : "+v"(p0), "+v"(p1));
      const float* v = kv.values[r] + static_cast<int64_t>(j - first) * d + c0;
#pragma GCC unroll 16
      for (int c = 0; c < kC; ++c) {
        const auto b = V::set1(v[c]);
        acc[c][0] = V::fma(b, p0, acc[c][0]);
        acc[c][1] = V::fma(b, p1, acc[c][1]);
      }
    }
  }
#pragma GCC unroll 16
  for (int c = 0; c < kC; ++c) {
    float* o = ot + static_cast<int64_t>(c0 + c) * rows;
    V::store(o, acc[c][0]);
    V::store(o + W, acc[c][1]);
  }
}

// The columns left after the whole groups of V::kValueColumns (fewer than it; an even count).
template <class V, int kC>
inline void accumulate_tail(const float* pt, int n, const KeyRuns& kv, int d, int c0, float* ot, int rows,
                            typename V::reg corr0, typename V::reg corr1) {
  if constexpr (kC > 0) {
    if (d - c0 == kC) return accumulate_columns<V, kC>(pt, n, kv, d, c0, ot, rows, corr0, corr1);
    accumulate_tail<V, kC - 2>(pt, n, kv, d, c0, ot, rows, corr0, corr1);
  }
}

// O^T = O^T * correction + P^T V over every column, V::kValueColumns at a time.
template <class V>
inline void accumulate_values(const float* pt, int n, const KeyRuns& kv, int d, float* ot, int rows,
                              typename V::reg corr0, typename V::reg corr1) {
  constexpr int kC = V::kValueColumns;
  int c0 = 0;
  for (; c0 + kC <= d; c0 += kC) accumulate_columns<V, kC>(pt, n, kv, d, c0, ot, rows, corr0, corr1);
  if (c0 < d) accumulate_tail<V, (kC - 1) / 2 * 2>(pt, n, kv, d, c0, ot, rows, corr0, corr1);
}

// Online softmax over n keys of one tile's S^T (two vectors of rows) whose maxima are
// block0/1: S^T becomes P^T, the running max m and sum l are updated, and the factor to
// rescale O^T by is returned.
template <class V>
inline void softmax_block(float* st, int n, typename V::reg block0, typename V::reg block1, float* m, float* l,
                          typename V::reg& corr0, typename V::reg& corr1) {
  constexpr int W = V::kLanes;
  const auto old0 = V::load(m), old1 = V::load(m + W);
  const auto max0 = V::max(old0, block0), max1 = V::max(old1, block1);
  auto sum0 = V::zero(), sum1 = V::zero();
  for (int j = 0; j < n; ++j) {
    const auto p0 = V::exp(V::sub(V::load(st + j * 2 * W), max0));
    const auto p1 = V::exp(V::sub(V::load(st + j * 2 * W + W), max1));
    V::store(st + j * 2 * W, p0);
    V::store(st + j * 2 * W + W, p1);
    sum0 = V::add(sum0, p0);
    sum1 = V::add(sum1, p1);
  }
  corr0 = V::exp(V::sub(old0, max0));
  corr1 = V::exp(V::sub(old1, max1));
  V::store(m, max0);
  V::store(m + W, max1);
  V::store(l, V::fma(V::load(l), corr0, sum0));
  V::store(l + W, V::fma(V::load(l + W), corr1, sum1));
}

// The rows of the key block [k0, k0 + n) as runs (KeyRuns): a float pool's pages read in place,
// one run a page (pages of at least 32 keys); else one contiguous [n, head_dim] copy each of K
// and V in `staged` (a bf16 pool's widened once a block, for every query tile; pages too small
// for kMaxRuns runs).
template <class V>  // (a template only so that each ISA's file has its own copy)
inline void key_block(const kv::KvLayerView& kv, int kv_head, int k0, int n, float* staged, KeyRuns* out) {
  const kv::PagedKvPool& pool = *kv.pool;
  const int d = pool.shape().head_dim, page_size = pool.shape().page_size;
  const auto& pages = *kv.pages;
  const int first_page = k0 / page_size, last_page = (k0 + n - 1) / page_size;
  if (!pool.bf16() && last_page - first_page < kMaxRuns) {
    out->runs = 0;
    for (int page = first_page; page <= last_page; ++page) {
      const int j = std::max(k0, page * page_size) - k0, at = (k0 + j) % page_size;
      out->begin[out->runs] = j;
      out->keys[out->runs] = pool.key_page(kv.layer, pages[page], kv_head) + static_cast<int64_t>(at) * d;
      out->values[out->runs] = pool.value_page(kv.layer, pages[page], kv_head) + static_cast<int64_t>(at) * d;
      ++out->runs;
    }
    out->begin[out->runs] = n;
    return;
  }
  float* k_out = staged;
  float* v_out = staged + static_cast<int64_t>(kKeyBlock) * d;
  for (int j = 0; j < n;) {
    const int pos = k0 + j, page = pages[pos / page_size], at = pos % page_size;
    const int run = std::min(page_size - at, n - j);
    pool.load_rows(kv.layer, page, kv_head, false, int64_t(at) * d, int64_t(run) * d, k_out + int64_t(j) * d);
    pool.load_rows(kv.layer, page, kv_head, true, int64_t(at) * d, int64_t(run) * d, v_out + int64_t(j) * d);
    j += run;
  }
  *out = KeyRuns{};
  out->runs = 1;
  out->begin[1] = n;
  out->keys[0] = k_out;
  out->values[0] = v_out;
}

// Row r of a block is token r / g, head r % g of the KV head's group (g = b.group); rows up to
// whole tiles past the real ones pad it. The source of a real row's query:
template <class V>  // (templates only, so that each ISA's file has its own copy)
inline const float* query_row(const QueryBlock& b, int r, int d) {
  return b.q + static_cast<int64_t>(b.first_token + r / b.group) * b.q_stride +
         static_cast<int64_t>(b.kv_head * b.group + r % b.group) * d;
}

// Each row's position (padding rows at the block's last: they see keys like real rows and
// stay finite; their output is dropped) and an empty softmax state.
template <class V>
inline void start_rows(const QueryBlock& b, int rows, int32_t* qpos, float* m, float* l) {
  const int first_pos = b.pos0 + b.first_token, last_pos = first_pos + b.tokens - 1;
  for (int r = 0; r < rows; ++r) {
    const int token = r < b.tokens * b.group ? r / b.group : b.tokens - 1;
    qpos[r] = b.last_key ? b.last_key[b.first_token + token] : r < b.tokens * b.group ? first_pos + token : last_pos;
    m[r] = kMaskedScore;
    l[r] = 0.0f;
  }
}

// Where the causal diagonal crosses the key block [k0, k0 + n) of a tile (its rows' positions
// from qpos): each row's future scores masked, then the block maxima taken again.
template <class V>
inline void mask_diagonal(float* st, int n, int k0, const int32_t* qpos, typename V::reg& max0, typename V::reg& max1) {
  constexpr int W = V::kLanes, TW = 2 * W;
  const int first_masked = std::max(0, qpos[0] + 1 - k0);
  max0 = max1 = V::set1(kMaskedScore);
  for (int jj = 0; jj < n; ++jj) {
    auto s0 = V::load(st + jj * TW), s1 = V::load(st + jj * TW + W);
    if (jj >= first_masked) {
      s0 = V::mask_after(s0, k0 + jj, qpos);
      s1 = V::mask_after(s1, k0 + jj, qpos + W);
      V::store(st + jj * TW, s0);
      V::store(st + jj * TW + W, s1);
    }
    max0 = V::max(max0, s0);
    max1 = V::max(max1, s1);
  }
}

// The real rows' outputs, O^T / l, into the block's output rows (and, when asked, each row's
// log-sum-exp m + log l).
template <class V>
inline void write_rows(const QueryBlock& b, const float* ot, const float* m, const float* l, int rows, int d) {
  for (int r = 0; r < b.tokens * b.group; ++r) {
    const float inv = 1.0f / l[r];
    const int64_t token = b.first_token + r / b.group, head = b.kv_head * b.group + r % b.group;
    float* dst = b.out + token * b.out_stride + head * d;
    for (int c = 0; c < d; ++c) dst[c] = ot[static_cast<int64_t>(c) * rows + r] * inv;
    if (b.lse) b.lse[token * b.lse_stride + head] = m[r] + std::log(l[r]);
  }
}

template <class V>
void attend_query_block(const QueryBlock& b, TileScratch& scratch) {
  constexpr int W = V::kLanes, TW = 2 * W, kJ = V::kKeys;
  const int d = b.head_dim, g = b.group;
  const int real_rows = b.tokens * g;
  const int rows = (real_rows + TW - 1) / TW * TW;  // padded to whole tiles
  float* qt = scratch.floats(0, static_cast<size_t>(d) * rows);
  float* ot = scratch.floats(1, static_cast<size_t>(d) * rows);
  float* m = scratch.floats(2, rows);
  float* l = scratch.floats(3, rows);
  float* st = scratch.floats(4, static_cast<size_t>(kKeyBlock) * TW);
  float* staged = scratch.floats(5, static_cast<size_t>(2) * kKeyBlock * d);
  int32_t* qpos = scratch.positions(rows);

  // Q^T, scaled (padding rows: zero queries).
  start_rows<V>(b, rows, qpos, m, l);
  for (int r = 0; r < rows; ++r) {
    const float* src = r < real_rows ? query_row<V>(b, r, d) : nullptr;
    for (int c = 0; c < d; ++c)
      qt[static_cast<int64_t>(c) * rows + r] = src ? (b.bf16 ? bf16::round(src[c]) : src[c]) * b.scale : 0.0f;
  }
  std::fill(ot, ot + static_cast<int64_t>(d) * rows, 0.0f);
  const int last_pos = qpos[rows - 1];

  for (int k0 = 0; k0 <= last_pos; k0 += kKeyBlock) {
    const int nk = std::min(kKeyBlock, last_pos + 1 - k0);
    KeyRuns kv;
    if (b.packed_keys) {  // a shard of keys already packed [kv_heads][rows][d]
      kv.runs = 1;
      kv.begin[1] = nk;
      kv.keys[0] = b.packed_keys + (b.kv_head * b.packed_rows + k0) * d;
      kv.values[0] = b.packed_values + (b.kv_head * b.packed_rows + k0) * d;
    } else {
      key_block<V>(*b.kv, b.kv_head, k0, nk, staged, &kv);
    }
    for (int t0 = 0; t0 < rows; t0 += TW) {
      const int tile_first = qpos[t0], tile_last = qpos[t0 + TW - 1];
      if (k0 > tile_last) continue;                    // the whole block lies in this tile's future
      const int n = std::min(nk, tile_last + 1 - k0);  // keys some row of the tile sees
      auto max0 = V::set1(kMaskedScore), max1 = max0;
      for (int r = 0; r < kv.runs && kv.begin[r] < n; ++r) {
        const int first = kv.begin[r], last = std::min(n, kv.begin[r + 1]);
        int j = first;
        for (; j + kJ <= last; j += kJ)
          score_keys<V, kJ>(qt + t0, rows, kv.keys[r] + static_cast<int64_t>(j - first) * d, d, st + j * TW, max0,
                            max1);
        if (j < last)
          score_tail<V, kJ - 1>(qt + t0, rows, kv.keys[r] + static_cast<int64_t>(j - first) * d, d, st + j * TW,
                                last - j, max0, max1);
      }
      if (k0 + n - 1 > tile_first) mask_diagonal<V>(st, n, k0, qpos + t0, max0, max1);
      typename V::reg corr0, corr1;
      softmax_block<V>(st, n, max0, max1, m + t0, l + t0, corr0, corr1);
      if (b.bf16) bf16::round_all(st, static_cast<int64_t>(n) * TW);
      accumulate_values<V>(st, n, kv, d, ot + t0, rows, corr0, corr1);
    }
  }
  write_rows<V>(b, ot, m, l, rows, d);
}

}  // namespace pf::cpu::tiles
