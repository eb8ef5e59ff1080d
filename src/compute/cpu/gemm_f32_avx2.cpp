// The float32 AVX2 GEMM (see gemm_f32_avx2.hpp). Compiled for AVX2 and FMA whatever the
// build's -march, under target attributes; only called where the CPU has them.
//
// The AVX-512 kernel's design (gemm_f32_avx512.cpp) on 16 registers: the weight is packed per
// panel of 16 output columns, k-major ([in][16]), and a tile of 6 rows x 16 columns keeps 12
// accumulators (2 loads and 6 broadcasts per 12 FMAs; the 2 FMA ports' 4-5 cycle latency
// needs 8-10 independent ones). A block is 3 panels (48 columns, in x 192 bytes: 288 KiB at in
// = 1,536, in L2): each tile of rows runs all three while its rows of x are in cache (L1 up to
// in = 1,365), so x is read from memory once per 48 columns rather than per 16
// (gemm_blocks.hpp: the block loop, shared with the other GEMMs).
#include "compute/cpu/gemm_f32_avx2.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "compute/cpu/gemm_blocks.hpp"

#if defined(PIPEFILL_X86_KERNELS)
#include <immintrin.h>
#endif

namespace pf::cpu {

#if defined(PIPEFILL_X86_KERNELS)
namespace {

constexpr int kPanelVectors = 2;
constexpr int kPanelColumns = 8 * kPanelVectors;
constexpr int kPanels = 3;
constexpr int kBlockColumns = kPanels * kPanelColumns;
constexpr int kTileRows = 6;

thread_local std::vector<float> packed;

// r[i] (row i, 8 values) becomes r[t] (value t of each of the 8 rows).
__attribute__((target("avx2,fma"))) inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);      // a0 b0 a1 b1 | a4 b4 a5 b5
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);  // a2 b2 a3 b3 | a6 b6 a7 b7
  }
  for (int h = 0; h < 2; ++h) {                                                             // rows 0-3, then 4-7
    u[4 * h + 0] = _mm256_shuffle_ps(t[4 * h + 0], t[4 * h + 2], _MM_SHUFFLE(1, 0, 1, 0));  // a0 b0 c0 d0 | a4..
    u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h + 0], t[4 * h + 2], _MM_SHUFFLE(3, 2, 3, 2));  // a1 b1 c1 d1 | a5..
    u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(1, 0, 1, 0));  // a2 .. | a6 ..
    u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(3, 2, 3, 2));  // a3 .. | a7 ..
  }
  for (int q = 0; q < 4; ++q) {
    r[q] = _mm256_permute2f128_ps(u[q], u[4 + q], 0x20);
    r[4 + q] = _mm256_permute2f128_ps(u[q], u[4 + q], 0x31);
  }
}

// packed[(p * in + k) * 16 + j] = W[begin + 16 p + j, k]; columns past `count` are zero.
__attribute__((target("avx2,fma"))) void pack_block(const float* weight, int in, int begin, int count) {
  packed.resize(static_cast<size_t>(in) * kBlockColumns);
  const int whole = in / 8 * 8;
  for (int j0 = 0; j0 < kBlockColumns; j0 += 8) {
    float* out = packed.data() + static_cast<int64_t>(j0 / kPanelColumns) * in * kPanelColumns + j0 % kPanelColumns;
    const float* row[8];
    for (int i = 0; i < 8; ++i) row[i] = j0 + i < count ? weight + static_cast<int64_t>(begin + j0 + i) * in : nullptr;
    for (int k0 = 0; k0 < whole; k0 += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = row[i] ? _mm256_loadu_ps(row[i] + k0) : _mm256_setzero_ps();
      transpose8(r);
      for (int t = 0; t < 8; ++t) _mm256_storeu_ps(out + static_cast<int64_t>(k0 + t) * kPanelColumns, r[t]);
    }
    for (int k = whole; k < in; ++k)
      for (int i = 0; i < 8; ++i) out[static_cast<int64_t>(k) * kPanelColumns + i] = row[i] ? row[i][k] : 0.0f;
  }
}

// y[r][0..columns) for kRows rows of x against one panel.
template <int kRows>
__attribute__((target("avx2,fma"))) void tile(const float* x, int in, const float* panel, float* y, int out,
                                              int columns) {
  __m256 acc[kRows][kPanelVectors];
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < kPanelVectors; ++c) acc[r][c] = _mm256_setzero_ps();
  const float* w = panel;
  for (int k = 0; k < in; ++k, w += kPanelColumns) {
    __m256 wv[kPanelVectors];
#pragma GCC unroll 4
    for (int c = 0; c < kPanelVectors; ++c) {
      wv[c] = _mm256_loadu_ps(w + 8 * c);
      // In registers: GCC would fold the loads into each row's FMAs (kRows loads a vector).
      asm("" : "+x"(wv[c]));
    }
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
      const __m256 xb = _mm256_broadcast_ss(x + static_cast<int64_t>(r) * in + k);
#pragma GCC unroll 4
      for (int c = 0; c < kPanelVectors; ++c) acc[r][c] = _mm256_fmadd_ps(xb, wv[c], acc[r][c]);
    }
  }
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < kPanelVectors; ++c) {
      const int left = columns - 8 * c;
      if (left <= 0) break;
      float* dst = y + static_cast<int64_t>(r) * out + 8 * c;
      if (left >= 8)
        _mm256_storeu_ps(dst, acc[r][c]);
      else
        _mm256_maskstore_ps(dst, _mm256_cmpgt_epi32(_mm256_set1_epi32(left), lane), acc[r][c]);
    }
}

// kRows rows against every panel of the packed block.
template <int kRows>
__attribute__((target("avx2,fma"))) void rows_by_block(const float* x, int in, float* y, int out, int columns) {
  for (int p = 0; p * kPanelColumns < columns; ++p)
    tile<kRows>(x, in, packed.data() + static_cast<int64_t>(p) * in * kPanelColumns, y + p * kPanelColumns, out,
                std::min(kPanelColumns, columns - p * kPanelColumns));
}

// The last rows (fewer than a tile), one instantiation per count.
template <int kRows>
void rows_tail(const float* x, int rows, int in, float* y, int out, int columns) {
  if constexpr (kRows > 0) {
    if (rows == kRows) return rows_by_block<kRows>(x, in, y, out, columns);
    rows_tail<kRows - 1>(x, rows, in, y, out, columns);
  }
}

struct Avx2Blocks {
  using Element = float;
  static constexpr int kBlockColumns = pf::cpu::kBlockColumns, kTileRows = pf::cpu::kTileRows;
  int in;
  int64_t x_stride;
  void pack_block(const float* weight, int begin, int count) { pf::cpu::pack_block(weight, in, begin, count); }
  void full_tile(const float* x, float* y, int out, int columns) { rows_by_block<kTileRows>(x, in, y, out, columns); }
  void last_rows(const float* x, int rows, float* y, int out, int columns) {
    rows_tail<kTileRows - 1>(x, rows, in, y, out, columns);
  }
};

}  // namespace

bool f32_avx2_gemm_available() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

void linear_f32_avx2(const float* x, int rows, int in, const float* weight, int begin, int end, int out, float* y) {
  Avx2Blocks kernel{in, in};
  linear_by_blocks(kernel, x, rows, in, weight, begin, end, out, y);
}

#else  // no x86 kernels in this build

bool f32_avx2_gemm_available() {
  return false;
}
void linear_f32_avx2(const float*, int, int, const float*, int, int, int, float*) {
  throw std::logic_error("linear_f32_avx2: this build has no x86 kernels (f32_avx2_gemm_available is false)");
}

#endif

}  // namespace pf::cpu
