// Projections: float32 through our AVX-512 or AVX2 GEMM or OpenBLAS sgemm, bf16 through
// vdpbf16ps or widened to float32; the [out, in] weight is used as stored.
#include "compute/cpu/gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "compute/cpu/blas_kernels.hpp"
#include "compute/cpu/cpu_features.hpp"
#include "compute/cpu/gemm_bf16_dot.hpp"
#include "compute/cpu/gemm_f32_avx2.hpp"
#include "compute/cpu/gemm_f32_avx512.hpp"
#include "compute/cpu/thread_pool.hpp"
#include "io/bf16.hpp"

namespace pf::cpu {
namespace {

thread_local double gemm_flops = 0;

// Each thread's widened block of weight rows, and the rounded x (one per caller).
thread_local std::vector<float> widened_weight;
thread_local std::vector<float> rounded_x;
thread_local std::vector<uint16_t> narrowed_x;  // the vdpbf16ps path's x, bf16 bits

// Weight rows widened per block: 256 rows of 1536 floats is 1.5 MiB, within L2 with the x
// panel sgemm packs; the widening costs one pass over the weight per chunk, ~1/rows of the GEMM.
constexpr int kWidenRows = 256;

// Splits the output's columns (the weight's rows) over the rank's pool, one slice a thread,
// each a multiple of 16 but the last; fn(begin, end) runs the slice's single-threaded GEMMs.
template <typename Slice>
void for_each_column_slice(int out, Slice&& fn) {
  ThreadPool& pool = ThreadPool::instance();
  constexpr int kMinColumns = 64;
  const int parts = std::max(1, std::min(pool.threads(), out / kMinColumns));
  pool.run(parts, [&](int part, int) {
    const int begin = static_cast<int>(int64_t(out) * part / parts / 16 * 16);
    const int end = part + 1 == parts ? out : static_cast<int>(int64_t(out) * (part + 1) / parts / 16 * 16);
    fn(begin, end);
  });
}

// A PIPEFILL_*_GEMM variable's choice: "" where unset, else `ours` or `other`
// (std::runtime_error on another value, or on `ours` where the kernel cannot run).
std::string forced_gemm(const char* variable, const char* ours, const char* other, bool ours_available,
                        const char* unavailable_why) {
  const char* value = std::getenv(variable);
  const std::string wanted = value ? value : "";
  if (!wanted.empty() && wanted != ours && wanted != other)
    throw std::runtime_error(std::string(variable) + "=" + wanted + ": expected " + ours + " or " + other);
  if (wanted == ours && !ours_available)
    throw std::runtime_error(std::string(variable) + "=" + ours +
                             ": this CPU, this build or PIPEFILL_CPU_ISA rules out " + unavailable_why);
  return wanted;
}

}  // namespace

F32GemmKernels decide_f32_gemm() {
  // PIPEFILL_CPU_ISA=avx2|portable narrows every hand-written kernel, these included.
  F32GemmKernels kernels;
  kernels.isa = kernel_isa();
  const bool available =
      (kernels.isa == Isa::kAvx512 && f32_gemm_available()) || (kernels.isa == Isa::kAvx2 && f32_avx2_gemm_available());
  const std::string wanted = forced_gemm("PIPEFILL_F32_GEMM", "own", "blas", available, "AVX2 and AVX-512");
  kernels.forced = !wanted.empty();
  kernels.own = kernels.forced ? wanted == "own" : available;
  return kernels;
}

const F32GemmKernels& f32_gemm_kernels() {
  static const F32GemmKernels kernels = decide_f32_gemm();
  return kernels;
}

std::string f32_gemm_description() {
  const F32GemmKernels& k = f32_gemm_kernels();
  const std::string forced = k.forced ? " (PIPEFILL_F32_GEMM)" : "";
  return k.own ? std::string(k.isa == Isa::kAvx512 ? "own AVX-512" : "own AVX2") + " GEMMs" + forced + " (" +
                     blas_kernels_description() + " below " + std::to_string(kOwnGemmMinRows) + " rows)"
               : blas_kernels_description() + forced;
}

namespace {
// Our GEMM for this ISA (f32_gemm_kernels().own), on columns [begin, end) of y.
void own_linear(const float* x, int rows, int in, const float* weight, int begin, int end, int out, float* y) {
  if (f32_gemm_kernels().isa == Isa::kAvx512)
    linear_f32_avx512(x, rows, in, weight, begin, end, out, y);
  else
    linear_f32_avx2(x, rows, in, weight, begin, end, out, y);
}
}  // namespace

void linear(const float* x, int rows, int in, const float* weight, int out, float* y) {
  if (rows >= kOwnGemmMinRows && f32_gemm_kernels().own) {
    for_each_column_slice(out, [&](int begin, int end) { own_linear(x, rows, in, weight, begin, end, out, y); });
  } else {
    for_each_column_slice(out, [&](int begin, int end) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, end - begin, in, 1.0f, x, in,
                  weight + int64_t(begin) * in, in, 0.0f, y + begin, out);
    });
  }
  count_gemm_flops(2.0 * rows * in * out);
}

Bf16GemmKernels decide_bf16_gemm() {
  Bf16GemmKernels kernels;
  // PIPEFILL_CPU_ISA=avx2|portable narrows every hand-written kernel, this one included.
  const bool available = bf16_dot_available() && kernel_isa() == Isa::kAvx512;
  const std::string wanted = forced_gemm("PIPEFILL_BF16_GEMM", "dot", "widen", available, "vdpbf16ps");
  kernels.forced = !wanted.empty();
  if (kernels.forced) {
    kernels.dot = wanted == "dot";
    return kernels;
  }
  // vdpbf16ps counts twice the FLOPs of an FMA; it wins only where it issues about as fast
  // (Zen 4), not at half the rate (Emerald Rapids): 1.25x the FMA's FLOPs pays for the packing.
  if (available) kernels.rates = measure_bf16_dot_rates();
  kernels.dot = available && kernels.rates.dot >= 1.25 * kernels.rates.fma;
  return kernels;
}

namespace {
std::optional<Bf16GemmKernels> chosen_bf16_gemm;
std::once_flag bf16_gemm_once;
}  // namespace

void use_bf16_gemm(const Bf16GemmKernels& kernels) {
  // Never an instruction this CPU lacks, whatever another rank decided.
  Bf16GemmKernels here = kernels;
  here.dot = here.dot && bf16_dot_available() && kernel_isa() == Isa::kAvx512;
  chosen_bf16_gemm = here;
}

const Bf16GemmKernels& bf16_gemm_kernels() {
  // Set by the backend's set-up (one decision for the job); decided here on first use
  // otherwise (unit tests, benchmarks).
  std::call_once(bf16_gemm_once, [] {
    if (!chosen_bf16_gemm) chosen_bf16_gemm = decide_bf16_gemm();
  });
  return *chosen_bf16_gemm;
}

std::string bf16_gemm_description() {
  const Bf16GemmKernels& k = bf16_gemm_kernels();
  char rates[96] = "";
  if (k.rates.dot > 0)
    std::snprintf(rates, sizeof rates, " (vdpbf16ps %.0f GFLOP/s against %.0f for float32 FMAs)", k.rates.dot,
                  k.rates.fma);
  return std::string(k.dot ? "bf16 GEMMs on vdpbf16ps" : "bf16 GEMMs widened to sgemm") +
         (k.forced ? " (PIPEFILL_BF16_GEMM)" : rates);
}

namespace {

// x [rows, in] rounded to bf16 bits, each row padded with a zero to an even length.
void narrow_rows(const float* x, int rows, int in, std::vector<uint16_t>& out) {
  const int in_even = (in + 1) / 2 * 2;
  out.resize(static_cast<size_t>(rows) * in_even);
  for (int r = 0; r < rows; ++r) {
    bf16::narrow(x + static_cast<int64_t>(r) * in, in, out.data() + static_cast<size_t>(r) * in_even);
    if (in_even != in) out[static_cast<size_t>(r) * in_even + in] = 0;
  }
}

}  // namespace

void linear_bf16(const float* x, int rows, int in, const uint16_t* weight, int out, float* y) {
  if (bf16_gemm_kernels().dot) {
    narrow_rows(x, rows, in, narrowed_x);
    const uint16_t* xs = narrowed_x.data();
    for_each_column_slice(out, [&](int begin, int end) { linear_bf16_dot(xs, rows, in, weight, begin, end, out, y); });
    count_gemm_flops(2.0 * rows * in * out);
    return;
  }
  std::vector<float>& xr = rounded_x;
  xr.resize(static_cast<size_t>(rows) * in);
  const int64_t n = static_cast<int64_t>(rows) * in;
  std::copy_n(x, n, xr.data());
  bf16::round_all(xr.data(), n);
  const float* xs = xr.data();
  for_each_column_slice(out, [&](int begin, int end) {
    std::vector<float>& w = widened_weight;
    w.resize(static_cast<size_t>(std::min(kWidenRows, end - begin)) * in);
    for (int b0 = begin; b0 < end; b0 += kWidenRows) {
      const int b1 = std::min(end, b0 + kWidenRows);
      bf16::widen(weight + int64_t(b0) * in, int64_t(b1 - b0) * in, w.data());
      if (rows >= kOwnGemmMinRows && f32_gemm_kernels().own)
        own_linear(xs, rows, in, w.data(), 0, b1 - b0, out, y + b0);
      else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, b1 - b0, in, 1.0f, xs, in, w.data(), in, 0.0f,
                    y + b0, out);
    }
  });
  count_gemm_flops(2.0 * rows * in * out);
}

void single_threaded_gemm() {
  // OpenBLAS' own threads busy-wait with sched_yield between calls, taking cores from the
  // attention threads. (An OpenMP build of OpenBLAS reads this per calling thread: there,
  // OMP_NUM_THREADS=1 does it; Debian's default is the pthreads build.)
  openblas_set_num_threads(1);
}

void count_gemm_flops(double flops) {
  gemm_flops += flops;
}
double counted_gemm_flops() {
  return gemm_flops;
}

}  // namespace pf::cpu
