// The ceilings of this CPU that pipefill's rates are shares of (scripts/bench_peers.sh):
//   fma_peak   float32 FMAs of one core: 16 independent vector accumulators, no memory traffic
//              (AVX-512 where the CPU has it, else AVX2);
//   bf16_peak  vdpbf16ps (AVX512-BF16) the same way, where the CPU has it: 2 products a lane;
//   sgemm      the best single-threaded float32 GEMM at 2048^3 a run can get: OpenBLAS's sgemm or
//              pipefill's own where it runs (gemm_f32_avx512.hpp, gemm_f32_avx2.hpp; gemm.cpp's
//              choice), the line naming both rates;
//   bandwidth  a STREAM-style triad a[i] = b[i] + s c[i] over 3 x 128 MiB, on THREADS threads.
// Each is the best of several trials (a shared machine only ever slows a trial down). Prints
// one `name value unit` line each; a ceiling the CPU cannot run prints nothing.
// usage: pipefill_cpu_ceilings [THREADS]
#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "compute/cpu/blas_kernels.hpp"
#include "compute/cpu/gemm.hpp"
#include "compute/cpu/gemm_bf16_dot.hpp"  // the FMA and vdpbf16ps loops pipefill itself times
#include "compute/cpu/gemm_f32_avx2.hpp"
#include "compute/cpu/gemm_f32_avx512.hpp"

namespace {

template <typename Work>
double seconds_of(Work&& work) {
  double best = 1e30;
  for (int trial = 0; trial < 5; ++trial) {
    const auto start = std::chrono::steady_clock::now();
    work();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

constexpr long kIterations = 20'000'000;

__attribute__((target("avx2,fma"))) float fma_avx2() {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(float(i));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
  for (long n = 0; n < kIterations; ++n)
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  float buffer[8], sum = 0;
  for (int i = 0; i < 12; ++i) {
    _mm256_storeu_ps(buffer, acc[i]);
    for (float x : buffer) sum += x;
  }
  return sum;
}

volatile float sink;

void print(const char* name, double value, const char* unit, const char* how) {
  std::printf("%-10s %8.1f %-8s %s\n", name, value, unit, how);
}

}  // namespace

int main(int argc, char** argv) {
  pf::cpu::choose_blas_kernels(argv);  // the kernels pipefill itself runs (re-executes at most once)
  const int threads = argc > 1 ? std::max(1, std::atoi(argv[1])) : 1;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    const double s = seconds_of([] { sink = pf::cpu::fma_avx512_loop(kIterations); });
    print("fma_peak", kIterations * 16.0 * 16 * 2 / s / 1e9, "GFLOP/s", "one core, float32 FMA, AVX-512");
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    const double s = seconds_of([] { sink = fma_avx2(); });
    print("fma_peak", kIterations * 12.0 * 8 * 2 / s / 1e9, "GFLOP/s", "one core, float32 FMA, AVX2");
  }
  if (__builtin_cpu_supports("avx512bf16")) {
    const double s = seconds_of([] { sink = pf::cpu::dot_bf16_loop(kIterations); });
    print("bf16_peak", kIterations * 16.0 * 16 * 4 / s / 1e9, "GFLOP/s", "one core, vdpbf16ps (AVX512-BF16)");
  }

  openblas_set_num_threads(1);
  constexpr int n = 2048;
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  const double gemm = seconds_of([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  });
  const double flops = 2.0 * n * n * n;
  std::string how_gemm = "one core, 2048^3, " + pf::cpu::blas_kernels_description();
  double best = flops / gemm / 1e9;
  // pipefill's own GEMM where gemm.cpp runs it (AVX-512's or AVX2's, as PIPEFILL_CPU_ISA allows).
  const pf::cpu::F32GemmKernels& kernels = pf::cpu::f32_gemm_kernels();
  const bool avx512 = kernels.own && kernels.isa == pf::cpu::Isa::kAvx512;
  if (kernels.own) {
    const double own = flops / seconds_of([&] {
                         if (avx512)
                           pf::cpu::linear_f32_avx512(a.data(), n, n, b.data(), 0, n, n, c.data());
                         else
                           pf::cpu::linear_f32_avx2(a.data(), n, n, b.data(), 0, n, n, c.data());
                       }) /
                       1e9;
    char rates[96];
    std::snprintf(rates, sizeof rates, " %.1f, pipefill's %s GEMM %.1f: the better", best, avx512 ? "AVX-512" : "AVX2",
                  own);
    how_gemm += rates;
    best = std::max(best, own);
  }
  print("sgemm", best, "GFLOP/s", how_gemm.c_str());

  constexpr size_t kFloats = size_t(32) << 20;  // 128 MiB an array: far beyond any cache
  std::vector<float> x(kFloats, 1.0f), y(kFloats, 2.0f), z(kFloats, 0.0f);
  const double triad = seconds_of([&] {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const size_t begin = kFloats * t / threads, end = kFloats * (t + 1) / threads;
        for (size_t i = begin; i < end; ++i) z[i] = x[i] + 3.0f * y[i];
      });
    for (auto& thread : pool) thread.join();
  });
  char how[64];
  std::snprintf(how, sizeof how, "triad, %d thread%s (3 x 128 MiB)", threads, threads == 1 ? "" : "s");
  print("bandwidth", 3.0 * kFloats * sizeof(float) / triad / 1e9, "GB/s", how);
  return 0;
}
