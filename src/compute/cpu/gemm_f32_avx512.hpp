// The float32 projections' GEMM of our own on AVX-512: on the Zen 4 it was written on it
// runs SmolLM2's projection shapes at 109-114 GFLOP/s a core (95 % of the FMA peak) against
// 103-108 for OpenBLAS's Cooperlake kernels, and it does not depend on the BLAS knowing the
// CPU (docs/choices.md). Where it runs is gemm.cpp's decision (f32_gemm_kernels).
#pragma once

namespace pf::cpu {

// This CPU runs AVX-512F and this build compiled the kernel.
bool f32_gemm_available();

// y[r, begin..end) = x[r, :] . W[begin..end, :]^T for r < rows: x [rows, in], W [out, in] as
// stored, y [rows, out], all float32. Single-threaded: the caller splits the columns.
void linear_f32_avx512(const float* x, int rows, int in, const float* weight, int begin, int end, int out, float* y);

}  // namespace pf::cpu
