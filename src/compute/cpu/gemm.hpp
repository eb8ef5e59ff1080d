// The one place the CPU backend calls BLAS for projections, and the FLOP tally of its GEMMs.
#pragma once

#include <cstdint>

namespace pf::cpu {

// y[rows, out] = x[rows, in] . W^T, W stored [out, in] as Hugging Face does. Split by output
// columns over the rank's threads (thread_pool.hpp), one single-threaded sgemm each.
void linear(const float* x, int rows, int in, const float* weight, int out, float* y);

// OpenBLAS runs single-threaded (the pool gives each thread its slice; docs/choices.md).
// Which of its kernels run: blas_kernels.hpp.
void single_threaded_gemm();

// The FLOPs of every GEMM this thread has run (linear, MLA's absorption, and attention's
// causal part): tests hold the analytic cost model (model::chunk_flops) to what the backend
// really computes.
void count_gemm_flops(double flops);
double counted_gemm_flops();

}  // namespace pf::cpu
