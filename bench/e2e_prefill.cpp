// End-to-end CPU prefill driver: one prompt through every layer of a model on one rank,
// chunk by chunk exactly as a pp1 x tp1 run does (embed, layers with paged KV, LM head),
// timed, with achieved GFLOP/s (linear + attention + LM head FLOPs counted) against the
// sgemm rate measured in the same run. Checks its result: the logits must be finite and
// equal a second, differently chunked pass over a short prefix.
//
//   OPENBLAS_NUM_THREADS=1 build/bench/bench_e2e_prefill [--preset small] [--tokens 16384] [--chunk-size 4096]
#include <cblas.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "compute/cpu/blas_kernels.hpp"
#include "compute/cpu/cpu_stage_compute.hpp"
#include "model/model_shape.hpp"
#include "model/presets.hpp"
#include "model/weights.hpp"
#include "sched/batch_plan.hpp"

using namespace pf;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double sgemm_gflops(int n) {
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a.data(), n, b.data(), n, 0, c.data(), n);
    best = std::max(best, 2.0 * n * n * n / seconds_since(t0) / 1e9);
  }
  return best;
}

struct Prefill {
  std::vector<float> logits;
  double seconds = 0;
  double flops = 0;
};

Prefill prefill(const model::ModelConfig& config, const model::StageWeights& weights,
                const std::vector<int32_t>& tokens, int chunk_size, int page_size) {
  const auto shard = model::make_shard_spec(config, 1, 0);
  const model::ModelShape model_shape = model::shape_from_config(config);
  const kv::KvShape shape{config.num_layers, config.num_kv_heads, config.head_dim, page_size};
  kv::PagedKvPool pool(shape, shape.pages_for(static_cast<int64_t>(tokens.size())));
  compute::CpuStageCompute compute(config, shard, weights, pool);
  const auto sizes = sched::chunk_sizes(static_cast<int64_t>(tokens.size()), sched::FixedChunkPolicy(chunk_size));
  std::vector<float> hidden(size_t(chunk_size) * config.hidden_size);
  Prefill result;
  result.logits.resize(config.vocab_size);
  const auto t0 = std::chrono::steady_clock::now();
  int64_t start = 0;
  for (int size : sizes) {
    compute.embed(tokens.data() + start, size, hidden.data());
    const compute::ChunkContext chunk{0, start, size};
    compute.forward(chunk, hidden.data());
    result.flops += model::chunk_flops(model_shape, 0, config.num_layers, size, start);
    start += size;
    if (start == static_cast<int64_t>(tokens.size()))
      compute.lm_head(hidden.data() + size_t(size - 1) * config.hidden_size, result.logits.data());
  }
  result.seconds = seconds_since(t0);
  result.flops += model_shape.lm_head_flops();
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  pf::cpu::choose_blas_kernels(argv);  // the GEMM kernels pipefill itself runs (re-executes at most once)
  std::string preset = "small";
  int tokens = 16384, chunk_size = 4096, page_size = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--preset")
      preset = argv[i + 1];
    else if (flag == "--tokens")
      tokens = std::stoi(argv[i + 1]);
    else if (flag == "--chunk-size")
      chunk_size = std::stoi(argv[i + 1]);
    else if (flag == "--page-size")
      page_size = std::stoi(argv[i + 1]);
  }
  const model::ModelConfig config = model::preset_config(preset);
  const auto source = model::make_synthetic_source(config, 0);
  const auto weights = model::load_stage_weights(config, *source, {0, config.num_layers}, true, true,
                                                 model::make_shard_spec(config, 1, 0));
  std::mt19937 rng(1);
  std::vector<int32_t> prompt(tokens);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % config.vocab_size);

  const double ceiling = sgemm_gflops(2048);
  const Prefill run = prefill(config, weights, prompt, chunk_size, page_size);

  // Check: finite, and a short prefix gives the same logits whatever the chunking.
  bool ok = true;
  for (float v : run.logits) ok = ok && std::isfinite(v);
  const std::vector<int32_t> head(prompt.begin(), prompt.begin() + std::min(tokens, 700));
  const auto a = prefill(config, weights, head, 700, page_size), b = prefill(config, weights, head, 96, page_size);
  double diff = 0, scale = 0;
  for (int v = 0; v < config.vocab_size; ++v) {
    diff = std::max(diff, double(std::fabs(a.logits[v] - b.logits[v])));
    scale = std::max(scale, double(std::fabs(a.logits[v])));
  }
  ok = ok && diff <= 1e-4 * scale;

  const double gflops = run.flops / run.seconds / 1e9;
  std::printf("%-8s %8s %6s %10s %10s %10s %12s %9s\n", "model", "tokens", "chunk", "seconds", "tokens/s", "GFLOP/s",
              "sgemm GF/s", "of_sgemm");
  std::printf("%-8s %8d %6d %10.2f %10.1f %10.1f %12.1f %8.1f%%\n", preset.c_str(), tokens, chunk_size, run.seconds,
              tokens / run.seconds, gflops, ceiling, 100.0 * gflops / ceiling);
  std::printf("check: logits finite, chunk 700 vs 96 relative difference %.2e: %s\n", scale > 0 ? diff / scale : diff,
              ok ? "Passed" : "FAILED");
  return ok ? 0 : 1;
}
