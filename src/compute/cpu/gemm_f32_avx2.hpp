// The float32 projections' GEMM of our own on AVX2 (CPUs without AVX-512: Zen 2 and 3,
// Haswell to Comet Lake): the AVX-512 kernel's packing and tiles on 16 registers
// (docs/choices.md has the measurements). Where it runs is gemm.cpp's decision
// (f32_gemm_kernels).
#pragma once

namespace pf::cpu {

// This CPU runs AVX2 and FMA and this build compiled the kernel.
bool f32_avx2_gemm_available();

// y[r, begin..end) = x[r, :] . W[begin..end, :]^T for r < rows: x [rows, in], W [out, in] as
// stored, y [rows, out], all float32. Single-threaded: the caller splits the columns.
void linear_f32_avx2(const float* x, int rows, int in, const float* weight, int begin, int end, int out, float* y);

}  // namespace pf::cpu
