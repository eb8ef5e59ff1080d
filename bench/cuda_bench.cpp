// The GPU benchmark that scripts/gpu_check.sh runs: the device's own ceilings (copy
// bandwidth, a large cuBLASLt GEMM), then pipefill's attention kernel at long prefixes,
// its GEMMs at Llama-3-8B shapes, and end-to-end single-GPU prefill of Llama-3-8B-shaped
// random weights (made on the device) at 32K and 128K tokens, with MFU. One table out, then
// the same figures as `metric KEY VALUE` lines for scripts (scripts/gpu_check.sh reads them).
// No MPI, no HDF5: it runs on a bare GPU machine. Every timed kernel's output is checked after
// its timing (sampled entries against double-precision formulas on the host, as nccl-tests
// checks what it timed): a wrong result prints `error:` and the exit status is 1.
//
// usage: pipefill_cuda_bench [--quick] [--chunk N] [--lengths 32768,131072] [--prefixes 8192,65536,262144]
//                            [--no-prefill] [--gemm N] [--copy-mib N] [--reps N] [--model PRESET]
// (--gemm and --copy-mib shrink the ceilings' problems, --reps the timed runs of each GEMM and attention case (the
// copy's stay 5),
// --model the GEMMs' and prefill's shapes, llama3-8b by default: the simulated-device test runs
// it small, where filling a Llama-3-8B weight takes seconds.)
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "compute/cuda/cuda_stage_compute.hpp"
#include "compute/cuda/lt_gemm.hpp"
#include "errors.hpp"
#include "model/model_shape.hpp"
#include "model/presets.hpp"

using namespace pf;

namespace {

constexpr double kDatasheetBf16Tflops = 989.4;  // H100/H200 SXM dense bf16

struct Row {
  std::string what, value, versus;
};
std::vector<Row> g_rows;
std::vector<std::pair<std::string, double>> g_metrics;  // printed last, one `metric KEY VALUE` line each
void add_row(std::string what, std::string value, std::string versus = "") {
  std::printf("  %-58s %-16s %s\n", what.c_str(), value.c_str(), versus.c_str());
  std::fflush(stdout);
  g_rows.push_back({std::move(what), std::move(value), std::move(versus)});
}
void add_metric(std::string key, double value) {
  g_metrics.emplace_back(std::move(key), value);
}

int g_failures = 0;  // checks that failed: the exit status is 1 if any did
// Records a check of what a benchmark timed: `error` against `bound`, said either way.
void check_result(const std::string& what, double error, double bound) {
  const bool ok = error <= bound;  // false for NaN too
  if (!ok) ++g_failures;
  std::printf("    check %-52s %s (max error %.3g, bound %.3g)\n", what.c_str(), ok ? "ok" : "WRONG", error, bound);
  if (!ok)
    std::fprintf(stderr, "error: %s computed a wrong result (max error %.3g > %.3g)\n", what.c_str(), error, bound);
}

template <typename T>
std::vector<T> download(const T* device, size_t count) {
  std::vector<T> host(count);
  CUDA_CHECK(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}
double to_double(kernels::bf16 x) {
  return static_cast<double>(__bfloat162float(x));
}

std::vector<int64_t> parse_list(char* text) {
  std::vector<int64_t> values;
  for (char* s = std::strtok(text, ","); s; s = std::strtok(nullptr, ",")) values.push_back(std::atoll(s));
  return values;
}
std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Mean seconds of `reps` runs of `work` on `stream` after `warmup` runs (CUDA events).
template <typename Work>
double time_on(cudaStream_t stream, int warmup, int reps, Work&& work) {
  for (int i = 0; i < warmup; ++i) work();
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < reps; ++i) work();
  CUDA_CHECK(cudaEventRecord(stop, stream));
  CUDA_CHECK(cudaEventSynchronize(stop));
  CUDA_CHECK_LAUNCH();
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms * 1e-3 / reps;
}

double copy_bandwidth(size_t mib) {
  const size_t bytes = mib << 20;
  cuda::DeviceArray<unsigned char> a(bytes), b(bytes);
  CUDA_CHECK(cudaMemset(a.data(), 1, bytes));
  const double s = time_on(nullptr, 2, 5, [&] {
    CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, nullptr));
  });
  return 2.0 * bytes / s;  // read + write
}

double gemm_tflops(cuda::LtGemm& gemm, int rows, int in, int out, int reps) {
  cuda::DeviceArray<kernels::bf16> x(size_t(rows) * in), w(size_t(out) * in);
  cuda::DeviceArray<float> y(size_t(rows) * out);
  kernels::fill_uniform_bf16(x.data(), x.size(), 1, 1.0f, nullptr);  // random, never zeros
  kernels::fill_uniform_bf16(w.data(), w.size(), 2, 0.05f, nullptr);
  const double s = time_on(nullptr, std::min(2, reps), reps,
                           [&] { gemm.linear(x.data(), rows, in, w.data(), out, y.data(), nullptr); });
  // 64 sampled entries of y = x W^T against their dot products in double, each bounded by
  // float32 accumulation of its terms' magnitudes.
  const auto hx = download(x.data(), x.size()), hw = download(w.data(), w.size());
  const auto hy = download(y.data(), y.size());
  double error = 0;
  for (int i = 0; i < 64; ++i) {
    const int64_t r = int64_t(i) * 7919 % rows, c = int64_t(i) * 104729 % out;
    double dot = 0, magnitude = 0;
    for (int j = 0; j < in; ++j) {
      const double term = to_double(hx[r * in + j]) * to_double(hw[c * in + j]);
      dot += term;
      magnitude += std::fabs(term);
    }
    error = std::max(error, std::fabs(dot - hy[r * out + c]) / (magnitude + 1e-30));
  }
  check_result("GEMM " + std::to_string(rows) + " x " + std::to_string(in) + " x " + std::to_string(out), error, 1e-4);
  return 2.0 * rows * in * out / s / 1e12;
}

// One chunk of `tokens` queries after `prefix` keys, Llama-3-8B's heads (32 q / 8 kv, d 128).
double attention_tflops(int64_t prefix, int tokens, int reps) {
  const int heads = 32, kv_heads = 8, d = 128, page = 64;
  const int64_t kv_len = prefix + tokens;
  const int pages = static_cast<int>((kv_len + page - 1) / page);
  kernels::PagedKv kv;
  kv.layers = 1;
  kv.kv_heads = kv_heads;
  kv.head_dim = d;
  kv.page_size = page;
  cuda::DeviceArray<kernels::bf16> cache(size_t(pages) * kv.page_layer_elements());
  kernels::fill_uniform_bf16(cache.data(), cache.size(), 3, 1.0f, nullptr);
  std::vector<int32_t> table(pages);
  for (int p = 0; p < pages; ++p) table[p] = p;
  cuda::DeviceArray<int32_t> d_table;
  d_table.upload(table);
  kv.base = cache.data();
  kv.page_table = d_table.data();
  const int q_stride = (heads + 2 * kv_heads) * d;
  cuda::DeviceArray<float> q(size_t(tokens) * q_stride);
  std::vector<float> host_q(q.size());
  // Queries in [-8, 8]: scores spread wide enough that each row's softmax picks out a few keys,
  // so the check below sees a wrong key, mask or page as a large error, not an averaged one.
  for (size_t i = 0; i < host_q.size(); ++i)
    host_q[i] = 8.0f * (static_cast<float>((i * 2654435761u) % 2001) / 1000.0f - 1.0f);
  CUDA_CHECK(cudaMemcpy(q.data(), host_q.data(), host_q.size() * sizeof(float), cudaMemcpyHostToDevice));
  cuda::DeviceArray<kernels::bf16> out(size_t(tokens) * heads * d);
  kernels::AttentionArgs args;
  args.q = q.data();
  args.q_stride = q_stride;
  args.tokens = tokens;
  args.pos0 = prefix;
  args.heads = heads;
  args.kv = kv;
  args.out = out.data();
  args.out_stride = heads * d;
  const double s = time_on(nullptr, 1, reps, [&] { kernels::chunk_attention(args, nullptr); });
  // The first and last query of the chunk, one head per KV head, against causal softmax
  // attention in double over the bf16 cache (queries rounded to bf16 as the kernel does).
  const auto hcache = download(cache.data(), cache.size()), hout = download(out.data(), out.size());
  double error = 0;
  for (const int t : {0, tokens - 1})
    for (int h = 0; h < heads; h += heads / kv_heads) {
      const int kvh = h / (heads / kv_heads);
      const int64_t keys = prefix + t + 1;
      std::vector<double> p(keys);
      double max = -1e300, sum = 0;
      for (int64_t j = 0; j < keys; ++j) {
        const kernels::bf16* k =
            hcache.data() + (j / page) * kv.page_layer_elements() + (int64_t(kvh) * page + j % page) * d;
        double dot = 0;
        for (int c = 0; c < d; ++c)
          dot += to_double(__float2bfloat16(host_q[size_t(t) * q_stride + h * d + c])) * to_double(k[c]);
        max = std::max(max, p[j] = dot / std::sqrt(double(d)));
      }
      for (double& x : p) sum += (x = std::exp(x - max));
      std::vector<double> o(d, 0.0);
      for (int64_t j = 0; j < keys; ++j) {
        const kernels::bf16* v = hcache.data() + (j / page) * kv.page_layer_elements() +
                                 (int64_t(kv_heads) * page + int64_t(kvh) * page + j % page) * d;
        for (int c = 0; c < d; ++c) o[c] += p[j] * to_double(v[c]);
      }
      for (int c = 0; c < d; ++c)
        error = std::max(error, std::fabs(o[c] / sum - to_double(hout[size_t(t) * heads * d + h * d + c])));
    }
  // bf16 products (P and V rounded) and a bf16 output: a few bf16 ulps of values in [-1, 1].
  check_result("attention at prefix " + std::to_string(prefix), error, 1e-2);
  const double flops = 4.0 * heads * d * (double(tokens) * prefix + double(tokens) * (tokens + 1) / 2);
  return flops / s / 1e12;
}

struct PrefillResult {
  double seconds, flops, first_chunk_s, last_chunk_s;
};

// Every layer of the model on one GPU, the prompt in chunks of `chunk`, then the LM head.
PrefillResult prefill(cuda::CudaStageCompute& gpu, const model::ModelConfig& config, int64_t length, int chunk,
                      int prompt_id) {
  const model::ModelShape shape = model::shape_from_config(config);
  std::vector<int32_t> tokens(length);
  for (int64_t i = 0; i < length; ++i) tokens[i] = static_cast<int32_t>((i * 7919 + 13) % config.vocab_size);
  cuda::DeviceArray<float> hidden(size_t(chunk) * config.hidden_size);
  std::vector<float> logits(config.vocab_size);
  PrefillResult r{0, 0, 0, 0};
  gpu.synchronize();
  cudaEvent_t t0, t1;
  CUDA_CHECK(cudaEventCreate(&t0));
  CUDA_CHECK(cudaEventCreate(&t1));
  const auto wall0 = std::chrono::steady_clock::now();
  for (int64_t start = 0; start < length; start += chunk) {
    const int t = static_cast<int>(std::min<int64_t>(chunk, length - start));
    const bool first = start == 0, last = start + t == length;
    if (first || last) CUDA_CHECK(cudaEventRecord(t0, gpu.forward_stream()));
    gpu.embed(tokens.data() + start, t, hidden.data());
    gpu.forward({prompt_id, start, t}, hidden.data());
    if (first || last) {
      CUDA_CHECK(cudaEventRecord(t1, gpu.forward_stream()));
      CUDA_CHECK(cudaEventSynchronize(t1));
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
      (first ? r.first_chunk_s : r.last_chunk_s) = ms * 1e-3;
    }
    r.flops += model::chunk_flops(shape, 0, config.num_layers, t, start);
    if (last) gpu.lm_head(hidden.data() + size_t(t - 1) * config.hidden_size, logits.data());
  }
  gpu.synchronize();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  r.flops += 2.0 * config.hidden_size * config.vocab_size;
  // Random weights have no reference to match; what a broken forward shows is non-finite or
  // constant logits.
  double lo = logits[0], hi = logits[0], bad = 0;
  for (float x : logits) {
    if (!std::isfinite(x)) bad = 1;
    lo = std::min<double>(lo, x);
    hi = std::max<double>(hi, x);
  }
  if (!bad && hi <= lo) bad = 1;
  check_result("prefill " + std::to_string(length) + " tokens: finite, varied logits", bad, 0);
  gpu.finish_prompt(prompt_id);
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  return r;
}

// End to end: all layers of `config` on this GPU, one prompt of each length in chunks of `chunk`.
void prefill_rows_for(const std::string& preset, const model::ModelConfig& config, const std::vector<int64_t>& lengths,
                      int chunk, double ceiling) {
  const model::ShardSpec shard = model::make_shard_spec(config, 1, 0);
  cuda::CudaStageCompute gpu(config, shard,
                             cuda::DeviceWeights::random(config, shard, config.num_layers, true, true, 1), 64, chunk);
  int64_t longest = 0;
  for (int64_t l : lengths) longest = std::max(longest, l);
  const kv::KvShape kv_shape = gpu.kv_shape();
  gpu.allocate_kv(kv_shape.pages_for(longest + chunk));
  prefill(gpu, config, 2 * 1024, 1024, 0);  // warm-up: GEMM plans, allocations
  int prompt = 1;
  for (const int64_t length : lengths) {
    const PrefillResult r = prefill(gpu, config, length, chunk, prompt++);
    const double tflops = r.flops / r.seconds / 1e12;
    add_row("prefill " + preset + " " + std::to_string(length / 1024) + "K tokens, chunk " + std::to_string(chunk),
            fmt("%.0f tok/s", length / r.seconds),
            fmt("%.1f s, ", r.seconds) + fmt("%.0f TFLOP/s, ", tflops) +
                fmt("MFU %.1f%% (989 peak), ", 100 * tflops / kDatasheetBf16Tflops) +
                fmt("%.0f%% of the measured ceiling; ", 100 * tflops / ceiling) +
                fmt("chunk time first %.3f s, ", r.first_chunk_s) + fmt("last %.3f s", r.last_chunk_s));
    const std::string key = "prefill_" + std::to_string(length) + "_";
    add_metric(key + "seconds", r.seconds);
    add_metric(key + "tok_s", length / r.seconds);
    add_metric(key + "tflops", tflops);
    add_metric(key + "mfu_pct", 100 * tflops / kDatasheetBf16Tflops);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, prefill_rows = true;
  int chunk = 8192, gemm_size = 8192, reps_option = 0;
  size_t copy_mib = 4096;
  std::string preset = "llama3-8b";
  std::vector<int64_t> lengths = {32768, 131072};
  std::vector<int64_t> prefixes = {8192, 65536, 262144};
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) {
      quick = true;
    } else if (!std::strcmp(argv[i], "--chunk") && i + 1 < argc) {
      chunk = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--lengths") && i + 1 < argc) {
      lengths = parse_list(argv[++i]);
    } else if (!std::strcmp(argv[i], "--prefixes") && i + 1 < argc) {
      prefixes = parse_list(argv[++i]);
    } else if (!std::strcmp(argv[i], "--gemm") && i + 1 < argc) {
      gemm_size = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--copy-mib") && i + 1 < argc) {
      copy_mib = std::atoll(argv[++i]);
    } else if (!std::strcmp(argv[i], "--model") && i + 1 < argc) {
      preset = argv[++i];
    } else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps_option = std::atoi(argv[++i]);
      if (reps_option < 1) {
        std::fprintf(stderr, "error: --reps %s: expected a whole number of at least 1\n", argv[i]);
        return 2;
      }
    } else if (!std::strcmp(argv[i], "--no-prefill")) {
      prefill_rows = false;  // the GPU check times prefill through `pipefill run` instead
    } else {
      std::fprintf(stderr,
                   "usage: %s [--quick] [--chunk N] [--lengths 32768,131072] [--prefixes 8192,65536,262144] "
                   "[--no-prefill] [--gemm N] [--copy-mib N] [--reps N] [--model PRESET]\n",
                   argv[0]);
      return 2;
    }
  }
  model::ModelConfig config;
  try {
    config = model::preset_config(preset);
  } catch (const UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  if (config.is_mla() || config.is_moe()) {  // the GEMM shapes and the prefill below are a dense model's
    std::fprintf(stderr, "error: --model %s: a dense preset (tiny, small, llama3-8b, ...), not MoE or MLA\n",
                 preset.c_str());
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "error: no usable CUDA device\n");
    return 2;
  }
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("pipefill GPU benchmark on %s (%d SMs, %.1f GiB)%s\n", prop.name, prop.multiProcessorCount,
              prop.totalGlobalMem / 1073741824.0, quick ? " [quick]" : "");
  const int reps = reps_option > 0 ? reps_option : quick ? 3 : 10;

  const double bandwidth = copy_bandwidth(copy_mib);
  add_row("device copy bandwidth (read + write)", fmt("%.2f TB/s", bandwidth / 1e12));
  add_metric("copy_tb_s", bandwidth / 1e12);
  cuda::LtGemm gemm;
  const double ceiling = gemm_tflops(gemm, gemm_size, gemm_size, gemm_size, reps);
  add_row("GEMM " + std::to_string(gemm_size) + "^3 bf16 in, f32 out (cuBLASLt): the ceiling",
          fmt("%.0f TFLOP/s", ceiling), fmt("%.0f%% of datasheet 989", 100 * ceiling / kDatasheetBf16Tflops));
  add_metric("gemm_ceiling_tflops", ceiling);

  const int h = config.hidden_size, inter = config.intermediate_size;
  const int qkv = (config.num_heads + 2 * config.num_kv_heads) * config.head_dim;
  struct Shape {
    const char* name;
    int in, out;
  } shapes[] = {
      {"qkv", h, qkv}, {"o", config.num_heads * config.head_dim, h}, {"gate_up", h, 2 * inter}, {"down", inter, h}};
  for (const auto& s : shapes) {
    const double t = gemm_tflops(gemm, chunk, s.in, s.out, reps);
    add_row("GEMM " + preset + " " + s.name + " (" + std::to_string(chunk) + " x " + std::to_string(s.in) + " x " +
                std::to_string(s.out) + ")",
            fmt("%.0f TFLOP/s", t), fmt("%.0f%% of the ceiling", 100 * t / ceiling));
    add_metric(std::string("gemm_") + s.name + "_tflops", t);
  }

  const int attn_chunk = std::min(4096, chunk);
  for (const int64_t prefix : prefixes) {
    const double t = attention_tflops(prefix, attn_chunk, reps_option > 0 ? reps_option : quick ? 2 : 5);
    const std::string at =
        prefix % 1024 == 0 && prefix > 0 ? std::to_string(prefix / 1024) + "K" : std::to_string(prefix);
    add_row("attention d128 GQA 32/8, " + std::to_string(attn_chunk) + " queries at prefix " + at,
            fmt("%.0f TFLOP/s", t), fmt("%.0f%% of the ceiling", 100 * t / ceiling));
    add_metric("attention_prefix_" + std::to_string(prefix) + "_tflops", t);
  }
  if (prefill_rows) prefill_rows_for(preset, config, lengths, chunk, ceiling);

  std::printf("\n| figure | value | against |\n|---|---|---|\n");
  for (const auto& row : g_rows)
    std::printf("| %s | %s | %s |\n", row.what.c_str(), row.value.c_str(), row.versus.c_str());
  std::printf("\n");
  for (const auto& [key, value] : g_metrics) std::printf("metric %s %.6g\n", key.c_str(), value);
  if (g_failures > 0) std::fprintf(stderr, "error: %d check(s) of what was timed failed\n", g_failures);
  return g_failures > 0 ? 1 : 0;
}
