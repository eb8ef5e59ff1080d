// The float32 AVX-512 GEMM (see gemm_f32_avx512.hpp). Compiled for AVX-512F whatever the
// build's -march, under a target attribute; only called where the CPU has it.
//
// The weight is packed per block of 64 output columns, k-major: packed [in][64], so one k step
// of a tile is 4 loads of 16 columns and, per row, a broadcast of x[r][k] into 4 FMAs. A tile
// of 4 rows x 64 columns keeps 16 accumulators (every FMA of a step independent: enough to
// cover the FMA latency on 1 and 2 FMA ports). Measured on Zen 4 against 6x48, 8x48, 12x32 and
// 5x64 tiles: 4x64 was the best or within noise of it on every projection shape. The packing
// transposes 16 x 16 blocks in registers (one pass over the block's weight rows, ~1 % of the
// GEMM at 1,024 rows; a scalar transposing pack cost 5 %), and the block's panel (in x 256
// bytes: 384 KiB at in = 1,536) stays in L2 while every row of the chunk passes over it
// (gemm_blocks.hpp: the block loop, shared with the other GEMMs).
#include "compute/cpu/gemm_f32_avx512.hpp"

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

constexpr int kBlockColumns = 64;  // 4 vectors of 16 lanes
constexpr int kTileRows = 4;

thread_local std::vector<float> packed;

// r[i] (row i, 16 values) becomes r[t] (value t of each of the 16 rows).
__attribute__((target("avx512f"))) inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i + 0] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  // r[4i + q] holds, in its 128-bit lane L, rows 4i..4i+3 of column 4L + q: gather the lanes.
  for (int i = 0; i < 2; ++i)
    for (int q = 0; q < 4; ++q) {
      t[8 * i + q] = _mm512_shuffle_f32x4(r[8 * i + q], r[8 * i + 4 + q], 0x88);
      t[8 * i + 4 + q] = _mm512_shuffle_f32x4(r[8 * i + q], r[8 * i + 4 + q], 0xDD);
    }
  for (int q = 0; q < 4; ++q) {
    r[q] = _mm512_shuffle_f32x4(t[q], t[8 + q], 0x88);
    r[8 + q] = _mm512_shuffle_f32x4(t[q], t[8 + q], 0xDD);
    r[4 + q] = _mm512_shuffle_f32x4(t[4 + q], t[12 + q], 0x88);
    r[12 + q] = _mm512_shuffle_f32x4(t[4 + q], t[12 + q], 0xDD);
  }
}

// packed[k * 64 + j] = W[begin + j, k]; columns past `count` are zero.
__attribute__((target("avx512f"))) void pack_block(const float* weight, int in, int begin, int count) {
  packed.resize(static_cast<size_t>(in) * kBlockColumns);
  float* out = packed.data();
  const int whole = in / 16 * 16;
  for (int j0 = 0; j0 < kBlockColumns; j0 += 16) {
    const float* row[16];
    for (int i = 0; i < 16; ++i) row[i] = j0 + i < count ? weight + static_cast<int64_t>(begin + j0 + i) * in : nullptr;
    for (int k0 = 0; k0 < whole; k0 += 16) {
      __m512 r[16];
      for (int i = 0; i < 16; ++i) r[i] = row[i] ? _mm512_loadu_ps(row[i] + k0) : _mm512_setzero_ps();
      transpose16(r);
      for (int t = 0; t < 16; ++t) _mm512_storeu_ps(out + static_cast<int64_t>(k0 + t) * kBlockColumns + j0, r[t]);
    }
    for (int k = whole; k < in; ++k)
      for (int i = 0; i < 16; ++i) out[static_cast<int64_t>(k) * kBlockColumns + j0 + i] = row[i] ? row[i][k] : 0.0f;
  }
}

template <int kRows>
__attribute__((target("avx512f"))) void tile(const float* x, int in, float* y, int out, int columns) {
  // Every loop over registers unrolled whole, so that the accumulators stay in registers.
  __m512 acc[kRows][4];
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_setzero_ps();
  const float* w = packed.data();
  for (int k = 0; k < in; ++k, w += kBlockColumns) {
    __m512 wv[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      wv[c] = _mm512_loadu_ps(w + 16 * c);
      // Held in a register: GCC's znver4 tuning would fold the load into each row's FMA
      // instead, 16 loads a step where 4 do (98 -> 62 GFLOP/s in a run).
      asm("" : "+v"(wv[c]));
    }
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
      const __m512 xb = _mm512_set1_ps(x[static_cast<int64_t>(r) * in + k]);
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_fmadd_ps(xb, wv[c], acc[r][c]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const int left = columns - 16 * c;
      if (left <= 0) break;
      const __mmask16 mask = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
      _mm512_mask_storeu_ps(y + static_cast<int64_t>(r) * out + 16 * c, mask, acc[r][c]);
    }
}

struct Avx512Blocks {
  using Element = float;
  static constexpr int kBlockColumns = pf::cpu::kBlockColumns, kTileRows = pf::cpu::kTileRows;
  int in;
  int64_t x_stride;
  void pack_block(const float* weight, int begin, int count) { pf::cpu::pack_block(weight, in, begin, count); }
  void full_tile(const float* x, float* y, int out, int columns) { tile<kTileRows>(x, in, y, out, columns); }
  void last_rows(const float* x, int rows, float* y, int out, int columns) {
    for (int r = 0; r < rows; ++r) tile<1>(x + r * x_stride, in, y + static_cast<int64_t>(r) * out, out, columns);
  }
};

}  // namespace

bool f32_gemm_available() {
  return __builtin_cpu_supports("avx512f");
}

void linear_f32_avx512(const float* x, int rows, int in, const float* weight, int begin, int end, int out, float* y) {
  Avx512Blocks kernel{in, in};
  linear_by_blocks(kernel, x, rows, in, weight, begin, end, out, y);
}

#else  // no x86 kernels in this build

bool f32_gemm_available() {
  return false;
}
void linear_f32_avx512(const float*, int, int, const float*, int, int, int, float*) {
  throw std::logic_error("linear_f32_avx512: this build has no x86 kernels (f32_gemm_available is false)");
}

#endif

}  // namespace pf::cpu
