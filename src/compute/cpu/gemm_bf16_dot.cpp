// The vdpbf16ps GEMM (see gemm_bf16_dot.hpp). Compiled for AVX512-BF16 whatever the build's
// -march; only called where the CPU has it (bf16_dot_available).
//
// The weight is packed per block of 64 output columns into pairs along the input: packed
// [in_even / 2][64][2], so one 64-byte load holds 16 columns' pair k and a broadcast 32-bit
// word of x holds row r's pair k. A tile of 4 rows x 64 columns keeps 16 accumulators; each
// pair step is 4 loads, 4 broadcasts and 16 vdpbf16ps. The packing (one pass over the weight
// per call, one store a pair) costs ~16/rows of the GEMM's instructions (1.6 % at chunks of
// 1,024); a block's packed panel (in_even x 128 bytes: 192 KiB for SmolLM2's 1,536) stays in
// L2 while every row of the chunk passes over it (gemm_blocks.hpp: the block loop, shared with
// the float32 GEMMs).
#include "compute/cpu/gemm_bf16_dot.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "compute/cpu/gemm_blocks.hpp"

#if defined(PIPEFILL_X86_KERNELS)
#include <immintrin.h>
#endif

namespace pf::cpu {

#if defined(PIPEFILL_X86_KERNELS)
namespace {

constexpr int kBlockColumns = 64;  // 4 vectors of 16 float32 lanes
constexpr int kTileRows = 4;

thread_local std::vector<uint16_t> packed;

// packed[(p * 64 + j) * 2 + t] = W[begin + j, 2p + t]; columns past `count` and the odd
// input's last pair half are zero. Pair-major, a 32-bit pair at a time: the writes are
// contiguous and the 64 rows read are 64 sequential streams (4 KiB of lines in L1), one store a
// pair, ~16/rows of the GEMM's instructions.
void pack_block(const uint16_t* weight, int in, int begin, int count, int pairs) {
  packed.resize(static_cast<size_t>(pairs) * kBlockColumns * 2);
  const int whole_pairs = in / 2;
  uint16_t* out = packed.data();
  for (int p = 0; p < pairs; ++p)
    for (int j = 0; j < kBlockColumns; ++j, out += 2) {
      uint32_t pair = 0;
      if (j < count) {
        const uint16_t* row = weight + static_cast<int64_t>(begin + j) * in;
        if (p < whole_pairs)
          std::memcpy(&pair, row + 2 * p, 4);
        else
          pair = row[2 * p];  // the odd input's last value, its partner zero (little-endian: low half first)
      }
      std::memcpy(out, &pair, 4);
    }
}

template <int kRows>
__attribute__((target("avx512f,avx512bf16"))) void tile(const uint16_t* x, int in_even, int pairs, float* y, int out,
                                                        int columns) {
  __m512 acc[kRows][4];
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_setzero_ps();
  const uint16_t* w = packed.data();
  for (int p = 0; p < pairs; ++p, w += kBlockColumns * 2) {
    __m512bh wv[4];
    for (int c = 0; c < 4; ++c) wv[c] = (__m512bh)_mm512_loadu_si512(w + 32 * c);
    for (int r = 0; r < kRows; ++r) {
      int32_t pair;
      std::memcpy(&pair, x + static_cast<int64_t>(r) * in_even + 2 * p, 4);
      const __m512bh xv = (__m512bh)_mm512_set1_epi32(pair);
      for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv, wv[c]);
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < 4; ++c) {
      const int left = columns - 16 * c;
      if (left <= 0) break;
      const __mmask16 mask = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
      _mm512_mask_storeu_ps(y + static_cast<int64_t>(r) * out + 16 * c, mask, acc[r][c]);
    }
}

// x's rows are in_even long (padded to whole pairs); W's are `in`.
struct Bf16DotBlocks {
  using Element = uint16_t;
  static constexpr int kBlockColumns = pf::cpu::kBlockColumns, kTileRows = pf::cpu::kTileRows;
  int in, pairs;
  int64_t x_stride;
  void pack_block(const uint16_t* weight, int begin, int count) {
    pf::cpu::pack_block(weight, in, begin, count, pairs);
  }
  void full_tile(const uint16_t* x, float* y, int out, int columns) {
    tile<kTileRows>(x, static_cast<int>(x_stride), pairs, y, out, columns);
  }
  void last_rows(const uint16_t* x, int rows, float* y, int out, int columns) {
    for (int r = 0; r < rows; ++r)
      tile<1>(x + r * x_stride, static_cast<int>(x_stride), pairs, y + static_cast<int64_t>(r) * out, out, columns);
  }
};

template <typename Body>
double best_seconds(Body&& body) {
  double best = 1e9;
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    body();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

constexpr long kRateIterations = 100'000;  // 1.6 M instructions of each: about a millisecond
volatile float rate_sink;

}  // namespace

bool bf16_dot_available() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
}

// 16 independent chains: enough to cover the latency on every core measured.
__attribute__((target("avx512f,avx512bf16"))) float dot_bf16_loop(long iterations) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80), b = (__m512bh)_mm512_set1_epi32(0x3a833a83);
  for (long n = 0; n < iterations; ++n)
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  float sum = 0;
  for (int i = 0; i < 16; ++i) sum += _mm512_reduce_add_ps(acc[i]);
  return sum;
}

__attribute__((target("avx512f"))) float fma_avx512_loop(long iterations) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  for (long n = 0; n < iterations; ++n)
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  float sum = 0;
  for (int i = 0; i < 16; ++i) sum += _mm512_reduce_add_ps(acc[i]);
  return sum;
}

Bf16DotRates measure_bf16_dot_rates() {
  if (!bf16_dot_available()) return {};
  const double instructions = kRateIterations * 16.0 * 16;  // of 16 lanes each
  Bf16DotRates rates;
  rates.dot = instructions * 4 / best_seconds([] { rate_sink = dot_bf16_loop(kRateIterations); }) / 1e9;
  rates.fma = instructions * 2 / best_seconds([] { rate_sink = fma_avx512_loop(kRateIterations); }) / 1e9;
  return rates;
}

void linear_bf16_dot(const uint16_t* x, int rows, int in, const uint16_t* weight, int begin, int end, int out,
                     float* y) {
  const int in_even = (in + 1) / 2 * 2;
  Bf16DotBlocks kernel{in, in_even / 2, in_even};
  linear_by_blocks(kernel, x, rows, in, weight, begin, end, out, y);
}

#else  // no x86 kernels in this build

bool bf16_dot_available() {
  return false;
}
Bf16DotRates measure_bf16_dot_rates() {
  return {};
}
float dot_bf16_loop(long) {
  throw std::logic_error("dot_bf16_loop: this build has no x86 kernels");
}
float fma_avx512_loop(long) {
  throw std::logic_error("fma_avx512_loop: this build has no x86 kernels");
}
void linear_bf16_dot(const uint16_t*, int, int, const uint16_t*, int, int, int, float*) {
  throw std::logic_error("linear_bf16_dot: this build has no x86 kernels (bf16_dot_available is false)");
}

#endif

}  // namespace pf::cpu
