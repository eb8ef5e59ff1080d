// --dtype bf16's GEMM on AVX512-BF16: `vdpbf16ps` multiplies two bf16 pairs a float32 lane
// and adds both products to the lane (products exact, sums rounded to float32, subnormals
// flushed), so a bf16 x bf16 -> float32 GEMM runs at two products a lane and instruction.
// Whether that beats float32 FMAs depends on the CPU, not on its features alone: Zen 4 issues
// vdpbf16ps as fast as an FMA (twice the FLOPs), an Emerald Rapids Xeon at half the rate (the
// same FLOPs, plus the packing). So the choice is measured (gemm.cpp, bf16_gemm_kernels).
#pragma once

#include <cstdint>

namespace pf::cpu {

// This CPU runs vdpbf16ps and this build compiled the kernel.
bool bf16_dot_available();

// One core's rates in GFLOP/s (a few milliseconds, the best of three): vdpbf16ps counted as
// four FLOPs a lane (two multiplies, two adds), float32 FMA as two. Only where available.
struct Bf16DotRates {
  double dot = 0, fma = 0;
};
Bf16DotRates measure_bf16_dot_rates();

// The loops those rates time (and bench/cpu_ceilings.cpp's peaks): `iterations` x 16
// independent vector instructions of 16 lanes, no memory traffic; the result only keeps the
// compiler from dropping them. Where bf16_dot_available() only.
float dot_bf16_loop(long iterations);
float fma_avx512_loop(long iterations);

// y[r, begin..end) = x[r, :] . W[begin..end, :]^T for r < rows: `x` [rows, in_even] bf16 bits,
// each row padded with a zero to an even length in_even (vdpbf16ps takes pairs), W [out, in]
// bf16 bits as stored, y [rows, out] float32. Single-threaded: the caller splits the columns.
void linear_bf16_dot(const uint16_t* x, int rows, int in, const uint16_t* weight, int begin, int end, int out,
                     float* y);

}  // namespace pf::cpu
