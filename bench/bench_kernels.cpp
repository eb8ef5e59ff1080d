// Micro-benchmarks of the CPU backend's kernels, each reported in GFLOP/s beside the
// sgemm rate measured at the start of the same run (the machine's ceiling for this
// backend), as `of_sgemm`. Single-threaded (OPENBLAS_NUM_THREADS=1; the kernels' pool has one
// thread until a run sets it): one rank, one core. scripts/bench_attention.sh sets torch's CPU
// attention beside these on the same shapes.
//
// Each benchmark then checks what it timed against a double-precision formula on sampled
// rows (as nccl-tests checks its buffers): a wrong result is reported as that benchmark's
// error, and the program exits with status 1.
//
//   OPENBLAS_NUM_THREADS=1 build/bench/bench_kernels
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "compute/cpu/attention.hpp"
#include "compute/cpu/blas_kernels.hpp"
#include "compute/cpu/gemm.hpp"

using namespace pf;

namespace {

double g_sgemm_gflops = 0;  // measured once in main()
int g_wrong_results = 0;    // benchmarks whose output failed its check

// Marks the benchmark failed when `error` (max abs against the formula) exceeds `bound`.
void check_result(benchmark::State& state, double error, double bound) {
  state.counters["max_error"] = error;
  if (error <= bound && std::isfinite(error)) return;
  ++g_wrong_results;
  state.SkipWithError(("wrong result: max error " + std::to_string(error) + " > " + std::to_string(bound)).c_str());
}

std::vector<float> random_vector(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

double measure_sgemm_gflops(int n) {
  const auto a = random_vector(size_t(n) * n, 1), b = random_vector(size_t(n) * n, 2);
  std::vector<float> c(size_t(n) * n);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a.data(), n, b.data(), n, 0, c.data(), n);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a.data(), n, b.data(), n, 0, c.data(), n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * n * n * n / s / 1e9);
  }
  return best;
}

void report(benchmark::State& state, double flops_per_iteration) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_iteration / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["of_sgemm"] =
      benchmark::Counter(flops_per_iteration / 1e9 / g_sgemm_gflops, benchmark::Counter::kIsIterationInvariantRate);
}

// Attention of one chunk of queries after a prefix, per path (the ISA kernels and the portable
// sgemm one), on three head layouts: `small`'s per rank (16 query / 8 KV heads, d 64),
// SmolLM2-135M's (9 / 3, d 64) and a Llama-3-8B rank's at TP 4 (8 / 2, d 128). Page size 64.
struct AttentionShape {
  const char* name;
  int heads, kv_heads, d;
};
constexpr AttentionShape kAttentionShapes[] = {{"small", 16, 8, 64}, {"smollm2", 9, 3, 64}, {"llama3-tp4", 8, 2, 128}};
constexpr cpu::Isa kIsas[] = {cpu::Isa::kPortable, cpu::Isa::kAvx2, cpu::Isa::kAvx512};

// kv: 0 a float cache; 1 a bf16 cache (--dtype bf16) on float FMAs; 2 the same on vdpbf16ps.
void attention_case(benchmark::State& state, int prefix, int chunk, const AttentionShape& shape, cpu::Isa isa, int kv) {
  if (!cpu::isa_available(isa)) return state.SkipWithError("this CPU or build has no such kernels");
  if (kv == 2 && !cpu::bf16_dot_available()) return state.SkipWithError("this CPU or build has no vdpbf16ps");
  state.SetLabel(std::string(shape.name) + " " + cpu::isa_name(isa) +
                 (kv == 0   ? ""
                  : kv == 1 ? " bf16 cache, float FMAs"
                            : " bf16 cache, vdpbf16ps"));
  const int heads = shape.heads, kv_heads = shape.kv_heads, d = shape.d, page = 64;
  const int total = prefix + chunk;
  kv::PagedKvPool pool({1, kv_heads, d, page, kv == 0 ? 4 : 2}, (total + page - 1) / page);
  pool.reserve(0, total);
  const auto k = random_vector(size_t(total) * kv_heads * d, 3), v = random_vector(size_t(total) * kv_heads * d, 4);
  pool.write(0, 0, 0, total, k.data(), kv_heads * d, v.data(), kv_heads * d);
  const auto q = random_vector(size_t(chunk) * heads * d, 5);
  std::vector<float> out(size_t(chunk) * heads * d);
  cpu::AttentionWorkspace ws;
  const kv::KvLayerView view{&pool, 0, &pool.pages(0)};
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (auto _ : state) {
    cpu::chunk_attention_on(isa, q.data(), heads * d, chunk, prefix, view, heads, scale, out.data(), heads * d, ws,
                            kv == 2);
    benchmark::DoNotOptimize(out.data());
  }
  report(state, cpu::chunk_attention_flops(chunk, prefix, heads, d));
  // Causal softmax attention in double for 6 query rows (first, last, between), every head.
  double error = 0;
  for (int t : {0, 1, chunk / 3, chunk / 2, chunk - 2, chunk - 1})
    for (int h = 0; h < heads; ++h) {
      const int kvh = h / (heads / kv_heads), keys = prefix + t + 1;
      std::vector<double> p(keys);
      double max = -1e300, sum = 0;
      for (int j = 0; j < keys; ++j) {
        double dot = 0;
        for (int c = 0; c < d; ++c)
          dot += double(q[(size_t(t) * heads + h) * d + c]) * k[(size_t(j) * kv_heads + kvh) * d + c];
        max = std::max(max, p[j] = dot * scale);
      }
      for (double& x : p) sum += (x = std::exp(x - max));
      for (int c = 0; c < d; ++c) {
        double o = 0;
        for (int j = 0; j < keys; ++j) o += p[j] * v[(size_t(j) * kv_heads + kvh) * d + c];
        error = std::max(error, std::fabs(o / sum - out[(size_t(t) * heads + h) * d + c]));
      }
    }
  check_result(state, error, kv == 0 ? 1e-4 : 2e-2);  // bf16: Q, K, V and P rounded
}

void BM_ChunkAttention(benchmark::State& state) {
  attention_case(state, static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
                 kAttentionShapes[state.range(2)], kIsas[state.range(3)], 0);
}
BENCHMARK(BM_ChunkAttention)
    ->ArgNames({"prefix", "chunk", "shape", "isa"})
    ->ArgsProduct({{0, 4096, 16384}, {1024}, {0, 1, 2}, {0, 1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// --dtype bf16's cache on AVX-512: float FMAs against vdpbf16ps (kv 1, 2).
void BM_ChunkAttentionBf16(benchmark::State& state) {
  attention_case(state, static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
                 kAttentionShapes[state.range(2)], cpu::Isa::kAvx512, static_cast<int>(state.range(3)));
}
BENCHMARK(BM_ChunkAttentionBf16)
    ->ArgNames({"prefix", "chunk", "shape", "kv"})
    ->ArgsProduct({{0, 4096, 16384}, {1024}, {0, 1, 2}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The projections of one `small` layer on a chunk: y = x W^T with W [out, in].
void BM_Projection(benchmark::State& state) {
  const int tokens = static_cast<int>(state.range(0)), in = static_cast<int>(state.range(1)),
            out = static_cast<int>(state.range(2));
  const auto x = random_vector(size_t(tokens) * in, 6), w = random_vector(size_t(out) * in, 7);
  std::vector<float> y(size_t(tokens) * out);
  for (auto _ : state) {
    cpu::linear(x.data(), tokens, in, w.data(), out, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  report(state, 2.0 * tokens * in * out);
  // 257 sampled entries of y against their dot products in double.
  double error = 0;
  for (int i = 0; i < 257; ++i) {
    const int r = int(int64_t(i) * 7919 % tokens), c = int(int64_t(i) * 104729 % out);
    double dot = 0;
    for (int j = 0; j < in; ++j) dot += double(x[size_t(r) * in + j]) * w[size_t(c) * in + j];
    error = std::max(error, std::fabs(dot - y[size_t(r) * out + c]));
  }
  check_result(state, error, 1e-3);
}
BENCHMARK(BM_Projection)
    ->ArgNames({"tokens", "in", "out"})
    ->Args({1024, 1024, 2048})  // fused q/k/v
    ->Args({1024, 1024, 1024})  // o
    ->Args({1024, 1024, 8192})  // fused gate/up
    ->Args({1024, 4096, 1024})  // down
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  pf::cpu::choose_blas_kernels(argv);  // the GEMM kernels pipefill itself runs (re-executes at most once)
  g_sgemm_gflops = measure_sgemm_gflops(2048);
  std::printf("ceiling: sgemm 2048^3 = %.1f GFLOP/s (%d BLAS thread(s)); of_sgemm below is the fraction of it\n",
              g_sgemm_gflops, openblas_get_num_threads());
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (g_wrong_results > 0) std::fprintf(stderr, "error: %d benchmark(s) computed a wrong result\n", g_wrong_results);
  return g_wrong_results > 0 ? 1 : 0;
}
