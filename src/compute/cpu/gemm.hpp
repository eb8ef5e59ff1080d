// The one place the CPU backend calls BLAS for projections, and the FLOP tally of its GEMMs.
#pragma once

#include <cstdint>
#include <string>

#include "compute/cpu/cpu_features.hpp"
#include "compute/cpu/gemm_bf16_dot.hpp"

namespace pf::cpu {

// y[rows, out] = x[rows, in] . W^T, W stored [out, in] as Hugging Face does. Split by output
// columns over the rank's threads (thread_pool.hpp), one single-threaded GEMM each: ours on
// AVX-512 or AVX2 (gemm_f32_avx512.hpp, gemm_f32_avx2.hpp) from kOwnGemmMinRows rows, else
// OpenBLAS's sgemm (its gemv is 3x ours on one row: the LM head of a prompt's last position).
void linear(const float* x, int rows, int in, const float* weight, int out, float* y);
constexpr int kOwnGemmMinRows = 4;

// Which float32 GEMM runs: ours wherever the CPU and PIPEFILL_CPU_ISA allow AVX-512 or AVX2
// (decided by features, so every run on a machine sums in the same order), PIPEFILL_F32_GEMM=
// own|blas forces one (tests, comparisons; std::runtime_error on a bad value or `own` without
// either).
struct F32GemmKernels {
  bool own = false;
  bool forced = false;
  Isa isa = Isa::kPortable;  // kernel_isa(): which of ours (AVX-512's or AVX2's)
};
F32GemmKernels decide_f32_gemm();
const F32GemmKernels& f32_gemm_kernels();  // decided on first use
std::string f32_gemm_description();        // for the run's header

// The same with a bf16 weight (--dtype bf16) and x rounded to bf16 on the way in: the
// products and float32 sums of a bf16 x bf16 -> float32 GEMM (io/bf16.hpp). Computed by
// vdpbf16ps where this CPU runs it faster than float32 FMAs (measured once, gemm_bf16_dot.hpp),
// else by sgemm on blocks of the weight widened into a per-thread float buffer.
// PIPEFILL_BF16_GEMM=dot|widen forces one (tests, comparisons).
void linear_bf16(const float* x, int rows, int in, const uint16_t* weight, int out, float* y);

// Which bf16 GEMM runs, and the rates it was decided on. A bf16 cache's attention follows
// the same choice (attention.hpp).
struct Bf16GemmKernels {
  bool dot = false;     // vdpbf16ps; false: widened to sgemm
  bool forced = false;  // by PIPEFILL_BF16_GEMM
  Bf16DotRates rates;   // zero where not measured
};
// This process's choice: PIPEFILL_BF16_GEMM, else the measured rates (std::runtime_error on a
// bad PIPEFILL_BF16_GEMM, or `dot` where vdpbf16ps cannot run).
Bf16GemmKernels decide_bf16_gemm();
// The job's choice (rank 0's decision, cpu_backend.cpp), before the first bf16 GEMM; a rank
// whose CPU lacks vdpbf16ps widens whatever it is told.
void use_bf16_gemm(const Bf16GemmKernels& kernels);
// The choice in force: use_bf16_gemm's, or decide_bf16_gemm's on first use without one.
const Bf16GemmKernels& bf16_gemm_kernels();
std::string bf16_gemm_description();  // for the run's header

// OpenBLAS runs single-threaded (the pool gives each thread its slice; docs/choices.md).
// Which of its kernels run: blas_kernels.hpp.
void single_threaded_gemm();

// The FLOPs of every GEMM this thread has run (linear, MLA's absorption, and attention's
// causal part): tests hold the analytic cost model (model::chunk_flops) to what the backend
// really computes.
void count_gemm_flops(double flops);
double counted_gemm_flops();

}  // namespace pf::cpu
