// The one place the CPU backend calls BLAS for projections, and the FLOP tally of its GEMMs.
#pragma once

#include <cstdint>

namespace pf::cpu {

// y[rows, out] = x[rows, in] . W^T, W stored [out, in] as Hugging Face does. Split by output
// columns over the rank's threads (thread_pool.hpp), one single-threaded sgemm each.
void linear(const float* x, int rows, int in, const float* weight, int out, float* y);

// The same with a bf16 weight (--dtype bf16) and x rounded to bf16 on the way in: the
// products and float32 sums of a bf16 x bf16 -> float32 GEMM (io/bf16.hpp), computed by sgemm
// on blocks of the weight widened into a per-thread float buffer. Why not vdpbf16ps: on the
// CPUs measured it runs at half the float32 FMA rate (docs/choices.md).
void linear_bf16(const float* x, int rows, int in, const uint16_t* weight, int out, float* y);

// OpenBLAS runs single-threaded (the pool gives each thread its slice; docs/choices.md).
// Which of its kernels run: blas_kernels.hpp.
void single_threaded_gemm();

// The FLOPs of every GEMM this thread has run (linear, MLA's absorption, and attention's
// causal part): tests hold the analytic cost model (model::chunk_flops) to what the backend
// really computes.
void count_gemm_flops(double flops);
double counted_gemm_flops();

}  // namespace pf::cpu
