// sgemm of the projections pipefill runs, through each BLAS library given on the command line
// (loaded with dlopen: OpenBLAS as linked, BLIS, oneDNN), in one process, best of several
// repetitions, GFLOP/s. The choice of docs/choices.md rests on it; scripts/bench_gemm_libraries.sh
// fetches the candidates from Debian and runs it.
//
//   gemm_libraries THREADS NAME=PATH...   (PATH: a shared library with cblas_sgemm, or oneDNN's)
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

// y[m, n] = x[m, k] . w[n, k]^T, row-major (pipefill's linear()).
using Gemm = std::function<void(int m, int n, int k, const float* x, const float* w, float* y)>;

Gemm load(const std::string& path, int threads) {
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "error: %s\n", dlerror());
    std::exit(2);
  }
  if (auto dnnl = reinterpret_cast<int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t,
                                           const float*, int64_t, float, float*, int64_t)>(dlsym(lib, "dnnl_sgemm")))
    return [dnnl](int m, int n, int k, const float* x, const float* w, float* y) {
      dnnl('N', 'T', m, n, k, 1.0f, x, k, w, k, 0.0f, y, n);
    };
  using Cblas = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
  auto cblas = reinterpret_cast<Cblas>(dlsym(lib, "cblas_sgemm"));
  if (!cblas) {
    std::fprintf(stderr, "error: %s has neither cblas_sgemm nor dnnl_sgemm\n", path.c_str());
    std::exit(2);
  }
  for (const char* set : {"openblas_set_num_threads", "bli_thread_set_num_threads"})
    if (auto f = reinterpret_cast<void (*)(int)>(dlsym(lib, set))) f(threads);
  constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
  return [cblas](int m, int n, int k, const float* x, const float* w, float* y) {
    cblas(kRowMajor, kNoTrans, kTrans, m, n, k, 1.0f, x, k, w, k, 0.0f, y, n);
  };
}

double gflops(const Gemm& gemm, int m, int n, int k) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(size_t(m) * k), w(size_t(n) * k), y(size_t(m) * n);
  for (auto& v : x) v = u(rng);
  for (auto& v : w) v = u(rng);
  gemm(m, n, k, x.data(), w.data(), y.data());
  double best = 1e30;
  for (int rep = 0; rep < 7; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    gemm(m, n, k, x.data(), w.data(), y.data());
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * m * n * k / best / 1e9;
}

struct Shape {
  const char* name;
  int m, n, k;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: gemm_libraries THREADS NAME=PATH...\n");
    return 2;
  }
  const int threads = std::atoi(argv[1]);
  // SmolLM2-135M's projections on a 512-token chunk, `small`'s, and the ceiling's square.
  const Shape shapes[] = {{"smollm2 qkv 512x960x576", 512, 960, 576},
                          {"smollm2 o 512x576x576", 512, 576, 576},
                          {"smollm2 gate_up 512x3072x576", 512, 3072, 576},
                          {"smollm2 down 512x576x1536", 512, 576, 1536},
                          {"small gate_up 512x8192x1024", 512, 8192, 1024},
                          {"small down 512x1024x4096", 512, 1024, 4096},
                          {"square 2048^3", 2048, 2048, 2048}};
  std::printf("%-30s", "GFLOP/s");
  for (int i = 2; i < argc; ++i)
    std::printf(" %14.14s", std::string(argv[i]).substr(0, std::string(argv[i]).find('=')).c_str());
  std::printf("\n");
  std::vector<Gemm> gemms;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    gemms.push_back(load(arg.substr(arg.find('=') + 1), threads));
  }
  for (const Shape& s : shapes) {
    std::printf("%-30s", s.name);
    for (const Gemm& g : gemms) std::printf(" %14.1f", gflops(g, s.m, s.n, s.k));
    std::printf("\n");
  }
  return 0;
}
