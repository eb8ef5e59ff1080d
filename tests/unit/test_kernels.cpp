// CPU kernels against direct double-precision formulas: attention (paged, chunked, GQA,
// causal; every ISA's kernel, threaded), RoPE with llama3 scaling, RMSNorm, SwiGLU, exp.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>

#include "compute/cpu/attention.hpp"
#include "compute/cpu/attention_kernels.hpp"
#include "compute/cpu/elementwise.hpp"
#include "compute/cpu/gemm.hpp"
#include "compute/cpu/gemm_f32_avx2.hpp"
#include "compute/cpu/gemm_f32_avx512.hpp"
#include "compute/cpu/thread_pool.hpp"
#include "io/bf16.hpp"
#include "model/presets.hpp"
#include "model/rope_frequencies.hpp"
#include "support/test_data.hpp"

using namespace pf;

namespace {

using test::random_vector;

// Causal attention of all `n` tokens, double precision, GQA by head // group.
std::vector<double> naive_attention(const std::vector<float>& q, const std::vector<float>& k,
                                    const std::vector<float>& v, int n, int heads, int kv_heads, int d) {
  std::vector<double> out(static_cast<size_t>(n) * heads * d, 0.0);
  const int group = heads / kv_heads;
  for (int h = 0; h < heads; ++h)
    for (int t = 0; t < n; ++t) {
      std::vector<double> s(t + 1);
      double mx = -1e300, total = 0;
      for (int j = 0; j <= t; ++j) {
        double dot = 0;
        for (int i = 0; i < d; ++i) dot += double(q[(t * heads + h) * d + i]) * k[(j * kv_heads + h / group) * d + i];
        s[j] = dot / std::sqrt(double(d));
        mx = std::max(mx, s[j]);
      }
      for (int j = 0; j <= t; ++j) total += (s[j] = std::exp(s[j] - mx));
      for (int j = 0; j <= t; ++j)
        for (int i = 0; i < d; ++i)
          out[(t * heads + h) * d + i] += s[j] / total * v[(j * kv_heads + h / group) * d + i];
    }
  return out;
}

struct AttentionCase {
  int n, heads, kv_heads, d, page_size, chunk;
};

}  // namespace

// Every attention path this CPU runs (the portable sgemm one, AVX2, AVX-512): each against the
// double-precision formula, chunk by chunk as the pipeline calls it, on 1 and 3 threads.
class ChunkAttention : public ::testing::TestWithParam<AttentionCase> {
 protected:
  // element_bytes 2: a bf16 pool (--dtype bf16), which also rounds Q and P.
  std::vector<float> attend(cpu::Isa isa, int threads, int element_bytes = 4, bool bf16_dot = false) {
    const auto c = GetParam();
    const auto q = random_vector(size_t(c.n) * c.heads * c.d, 1, 2.0f);
    const auto k = random_vector(size_t(c.n) * c.kv_heads * c.d, 2, 2.0f);
    const auto v = random_vector(size_t(c.n) * c.kv_heads * c.d, 3);
    kv::PagedKvPool pool({1, c.kv_heads, c.d, c.page_size, element_bytes}, (c.n + c.page_size - 1) / c.page_size + 3);
    // Take a page first so the prompt's pages are not 0, 1, 2, ...: the page table matters.
    pool.reserve(99, 1);
    std::vector<float> out(size_t(c.n) * c.heads * c.d, std::nanf(""));  // poisoned: unwritten shows up
    cpu::AttentionWorkspace ws;
    cpu::ThreadPool::instance().set_threads(threads);
    const float scale = 1.0f / std::sqrt(float(c.d));
    for (int pos0 = 0; pos0 < c.n; pos0 += c.chunk) {  // chunk by chunk, as the pipeline does
      const int tokens = std::min(c.chunk, c.n - pos0);
      pool.reserve(0, pos0 + tokens);
      pool.write(0, 0, pos0, tokens, k.data() + size_t(pos0) * c.kv_heads * c.d, c.kv_heads * c.d,
                 v.data() + size_t(pos0) * c.kv_heads * c.d, c.kv_heads * c.d);
      const kv::KvLayerView view{&pool, 0, &pool.pages(0)};
      cpu::chunk_attention_on(isa, q.data() + size_t(pos0) * c.heads * c.d, c.heads * c.d, tokens, pos0, view, c.heads,
                              scale, out.data() + size_t(pos0) * c.heads * c.d, c.heads * c.d, ws, bf16_dot);
    }
    cpu::ThreadPool::instance().set_threads(1);
    return out;
  }
};

TEST_P(ChunkAttention, EveryPathMatchesNaiveCausalAttention) {
  const auto c = GetParam();
  const auto q = random_vector(size_t(c.n) * c.heads * c.d, 1, 2.0f);
  const auto k = random_vector(size_t(c.n) * c.kv_heads * c.d, 2, 2.0f);
  const auto v = random_vector(size_t(c.n) * c.kv_heads * c.d, 3);
  const auto expected = naive_attention(q, k, v, c.n, c.heads, c.kv_heads, c.d);
  int paths = 0;
  for (cpu::Isa isa : {cpu::Isa::kPortable, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
    if (!cpu::isa_available(isa)) continue;
    ++paths;
    const auto out = attend(isa, 1);
    double worst = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_TRUE(std::isfinite(out[i])) << cpu::isa_name(isa) << " " << i;
      worst = std::max(worst, std::fabs(out[i] - expected[i]));
    }
    EXPECT_LT(worst, 2e-5) << cpu::isa_name(isa);
    // The rank's threads split the work by (KV head, query block): no row's sums change.
    EXPECT_EQ(attend(isa, 3), out) << cpu::isa_name(isa) << " on 3 threads";
  }
  EXPECT_GE(paths, 1);
#if defined(__x86_64__)
  // The head sizes these cases rely on reaching the AVX2 kernel do (any even one).
  if (c.d % 2 == 0) {
    EXPECT_TRUE(cpu::avx2_attention_fits(c.d)) << c.d;
  }
#endif
}

// A bf16 cache: every path against the double formula on Q, K and V rounded to bf16. The
// paths also round P to bf16 before P V (as the cuda kernel does), which moves each output by
// at most 2^-9 of max|v| (the formula cannot round P the same way: the online softmax scales
// it by block maxima); and the rounding must be there: the result is further from the
// unrounded formula than a float32 run is.
TEST_P(ChunkAttention, Bf16CacheMatchesTheFormulaOnRoundedInputs) {
  const auto c = GetParam();
  auto q = random_vector(size_t(c.n) * c.heads * c.d, 1, 2.0f);
  auto k = random_vector(size_t(c.n) * c.kv_heads * c.d, 2, 2.0f);
  auto v = random_vector(size_t(c.n) * c.kv_heads * c.d, 3);
  const auto unrounded = naive_attention(q, k, v, c.n, c.heads, c.kv_heads, c.d);
  for (auto* x : {&q, &k, &v}) bf16::round_all(x->data(), static_cast<int64_t>(x->size()));
  const auto expected = naive_attention(q, k, v, c.n, c.heads, c.kv_heads, c.d);
  // The AVX-512 path twice where the CPU has vdpbf16ps: on float FMAs and on bf16 pairs
  // (attention_bf16_dot.cpp; head sizes it does not take fall back to the float tiles).
  for (const auto& [isa, dot] : {std::pair{cpu::Isa::kPortable, false}, std::pair{cpu::Isa::kAvx2, false},
                                 std::pair{cpu::Isa::kAvx512, false}, std::pair{cpu::Isa::kAvx512, true}}) {
    if (!cpu::isa_available(isa) || (dot && !cpu::bf16_dot_available())) continue;
    const std::string path = std::string(cpu::isa_name(isa)) + (dot ? " on vdpbf16ps" : "");
    const auto out = attend(isa, 1, 2, dot);
    double worst = 0, moved = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_TRUE(std::isfinite(out[i])) << path << " " << i;
      worst = std::max(worst, std::fabs(out[i] - expected[i]));
      moved = std::max(moved, std::fabs(out[i] - unrounded[i]));
    }
    EXPECT_LT(worst, 2.5e-3) << path;
    EXPECT_GT(moved, 1e-4) << path << ": nothing was rounded";
    EXPECT_EQ(attend(isa, 3, 2, dot), out) << path << " on 3 threads";
    // Its own sums, not a silent fall-back to the float tiles.
    if (dot && cpu::bf16_dot_attention_fits(c.d)) {
      EXPECT_NE(out, attend(isa, 1, 2, false)) << path;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ChunkAttention,
    ::testing::Values(AttentionCase{37, 4, 2, 32, 16, 37},     // one chunk, partial page
                      AttentionCase{300, 4, 2, 32, 16, 64},    // many chunks, GQA 2
                      AttentionCase{300, 4, 4, 16, 64, 100},   // MHA, chunk not page aligned
                      AttentionCase{700, 8, 1, 64, 64, 256},   // MQA, key blocks > 1 page
                      AttentionCase{513, 2, 2, 128, 32, 1},    // one token per chunk
                      AttentionCase{520, 16, 2, 8, 8, 512},    // group 8: 32-token query blocks
                      AttentionCase{400, 9, 3, 64, 64, 150},   // SmolLM2's group of 3
                      AttentionCase{300, 8, 2, 128, 128, 97},  // d 128, one block a page
                      AttentionCase{600, 4, 1, 32, 200, 250},  // pages wider than a block
                      AttentionCase{500, 6, 2, 64, 48, 130},   // blocks across page edges
                      AttentionCase{400, 6, 2, 64, 33, 150},   // up to 5 page runs a block, odd edges
                      AttentionCase{200, 6, 2, 12, 16, 50},    // d 12: AVX2's kernel, not AVX-512's
                      AttentionCase{150, 4, 2, 10, 16, 40}));  // d 10: AVX2's 6 value columns, then 4

// The run's header names the attention kernel that runs for the model's head size.
TEST(Kernels, AttentionKernelNameSaysWhatRuns) {
  if (cpu::kernel_isa() == cpu::Isa::kPortable) {
    EXPECT_EQ(cpu::attention_kernel_name(64, false, false), "portable (sgemm)");
    return;
  }
  EXPECT_EQ(cpu::attention_kernel_name(7, false, false),
            "portable (sgemm: no kernel for head size 7)");  // odd: no tile
  EXPECT_EQ(cpu::attention_kernel_name(64, false, false), cpu::isa_name(cpu::kernel_isa()));
  // An even head size AVX-512's value tile does not divide runs on the AVX2 kernel there too.
  EXPECT_EQ(cpu::attention_kernel_name(10, false, false), "avx2");
  // The CP ring's shards never take the vdpbf16ps kernel: the float one of the same ISA.
  EXPECT_EQ(cpu::attention_kernel_name(64, true, true), cpu::isa_name(cpu::kernel_isa()));
}

TEST(Kernels, AttentionFlopCount) {
  // 3 tokens after a prefix of 2: keys seen 3 + 4 + 5 = 12.
  EXPECT_DOUBLE_EQ(cpu::chunk_attention_flops(3, 2, 1, 8), 4.0 * 8 * 12);
}

TEST(Kernels, ExpIsAccurate) {
  std::vector<float> x;
  for (float v = -90.0f; v <= 0.0f; v += 0.0371f) x.push_back(v);
  auto y = x;
  cpu::exp_inplace(y.data(), static_cast<int>(y.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] < -87.0f) {
      EXPECT_EQ(y[i], 0.0f);
      continue;
    }
    const double e = std::exp(double(x[i]));
    EXPECT_NEAR(y[i], e, e * 3e-7 + 1e-38) << x[i];
  }
}

TEST(Kernels, RmsNormAndSwiglu) {
  const std::vector<float> x = {1, -2, 3, -4}, w = {1, 0.5f, 2, 1};
  std::vector<float> y(4);
  cpu::rms_norm(x.data(), 1, 4, 4, w.data(), 1e-6f, y.data(), 4);
  const double rms = std::sqrt((1 + 4 + 9 + 16) / 4.0 + 1e-6);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], x[i] / rms * w[i], 1e-6);
  const std::vector<float> gate_up = {1.0f, -3.0f, 2.0f, 5.0f};  // gate {1,-3}, up {2,5}
  std::vector<float> out(2);
  cpu::swiglu(gate_up.data(), 1, 2, out.data());
  EXPECT_NEAR(out[0], 1.0 / (1 + std::exp(-1.0)) * 2, 1e-6);
  EXPECT_NEAR(out[1], -3.0 / (1 + std::exp(3.0)) * 5, 1e-6);
}

TEST(Kernels, RopeLlama3FrequencyBands) {
  model::ModelConfig c = model::preset_config("llama3-8b");
  const auto f = model::rope_inv_freq(c);
  ASSERT_EQ(f.size(), 64u);
  EXPECT_DOUBLE_EQ(f[0], 1.0);                                        // high frequency: kept
  EXPECT_NEAR(f[63], std::pow(500000.0, -126.0 / 128) / 8.0, 1e-18);  // low frequency: divided by 8
  // A medium band exists and lies strictly between the two rules.
  int medium = 0;
  for (int i = 0; i < 64; ++i) {
    const double base = std::pow(500000.0, -2.0 * i / 128);
    if (f[i] < base && f[i] > base / 8) ++medium;
  }
  EXPECT_GT(medium, 0);
}

TEST(Kernels, RopeRotatesHalves) {
  model::ModelConfig c = model::preset_config("tiny");
  c.rope_scaling = {};
  c.head_dim = 4;
  const auto f = model::rope_inv_freq(c);  // {1, 1/100}
  std::vector<float> x = {1, 2, 3, 4};
  cpu::apply_rope(x.data(), 1, 4, 1, 4, 5, f);
  const double a0 = 5 * 1.0, a1 = 5 * 0.01;
  EXPECT_NEAR(x[0], 1 * std::cos(a0) - 3 * std::sin(a0), 1e-6);
  EXPECT_NEAR(x[2], 3 * std::cos(a0) + 1 * std::sin(a0), 1e-6);
  EXPECT_NEAR(x[1], 2 * std::cos(a1) - 4 * std::sin(a1), 1e-6);
  EXPECT_NEAR(x[3], 4 * std::cos(a1) + 2 * std::sin(a1), 1e-6);
}

// The largest |y - x . W^T| over every output, each product summed in double (of the values
// rounded to bf16 where `bf16_inputs`). An output left unwritten (NaN) counts as infinitely far:
// std::max alone would skip it.
double worst_against_double(const std::vector<float>& y, const std::vector<float>& x, const std::vector<float>& w,
                            int rows, int in, int out, bool bf16_inputs = false) {
  double worst = 0;
  for (int r = 0; r < rows; ++r)
    for (int o = 0; o < out; ++o) {
      double exact = 0;
      for (int i = 0; i < in; ++i)
        exact += bf16_inputs ? double(bf16::round(x[r * in + i])) * bf16::round(w[o * in + i])
                             : double(x[r * in + i]) * w[o * in + i];
      const double error = std::fabs(y[r * out + o] - exact);
      worst = std::isnan(error) ? INFINITY : std::max(worst, error);
      if (std::isinf(worst)) return worst;
    }
  return worst;
}

// --dtype bf16's GEMM: x rounded to bf16, the weight stored as bf16, float32 sums: the double
// formula on the rounded values to float32 rounding (rows wider than a widened block of 256,
// several threads).
TEST(Kernels, LinearBf16IsABf16GemmWithFloat32Sums) {
  const int rows = 37, in = 97, out = 600;  // an odd width: the vdpbf16ps path pads a pair
  const auto x = random_vector(size_t(rows) * in, 4, 2.0f);
  const auto w = random_vector(size_t(out) * in, 5);
  std::vector<uint16_t> w16(w.size());
  bf16::narrow(w.data(), static_cast<int64_t>(w.size()), w16.data());
  std::vector<float> y(size_t(rows) * out, std::nanf(""));
  cpu::ThreadPool::instance().set_threads(3);
  cpu::linear_bf16(x.data(), rows, in, w16.data(), out, y.data());
  cpu::ThreadPool::instance().set_threads(1);
  EXPECT_LT(worst_against_double(y, x, w, rows, in, out, /*bf16_inputs=*/true), 2e-5);
  const double moved = worst_against_double(y, x, w, rows, in, out);
  EXPECT_GT(moved, 1e-3);  // the inputs really were rounded
  EXPECT_FALSE(std::isinf(moved));
}

// The vdpbf16ps kernel itself (where the CPU has it, whichever kernel linear_bf16 chose): the
// same double formula on the rounded values, on an odd input width (a zero-padded last pair),
// rows not a multiple of its 4-row tile and column slices that cut its 64-column blocks.
TEST(Kernels, LinearBf16DotIsTheSameBf16Gemm) {
  if (!cpu::bf16_dot_available()) GTEST_SKIP() << "this CPU has no vdpbf16ps (AVX512-BF16)";
  const int rows = 37, in = 97, out = 150, in_even = 98;
  const auto x = random_vector(size_t(rows) * in, 6, 2.0f);
  const auto w = random_vector(size_t(out) * in, 7);
  std::vector<uint16_t> w16(w.size()), x16(size_t(rows) * in_even, 0);
  bf16::narrow(w.data(), static_cast<int64_t>(w.size()), w16.data());
  for (int r = 0; r < rows; ++r) bf16::narrow(x.data() + r * in, in, x16.data() + r * in_even);
  std::vector<float> y(size_t(rows) * out, std::nanf(""));
  cpu::linear_bf16_dot(x16.data(), rows, in, w16.data(), 0, 80, out, y.data());
  cpu::linear_bf16_dot(x16.data(), rows, in, w16.data(), 80, out, out, y.data());
  EXPECT_LT(worst_against_double(y, x, w, rows, in, out, /*bf16_inputs=*/true), 2e-5);
  const cpu::Bf16DotRates rates = cpu::measure_bf16_dot_rates();
  EXPECT_GT(rates.dot, 0);
  EXPECT_GT(rates.fma, 0);
}

// The float32 AVX-512 GEMM (where the CPU has it): the double formula to float32 rounding, on
// an input width that is not a multiple of its 16 x 16 packing transposes, rows not a multiple
// of its 4-row tile, and column slices that cut its 64-column blocks and end mid-vector.
TEST(Kernels, LinearF32Avx512IsTheFloat32Gemm) {
  if (!cpu::f32_gemm_available()) GTEST_SKIP() << "this CPU has no AVX-512F";
  const int rows = 37, in = 97, out = 150;
  const auto x = random_vector(size_t(rows) * in, 8, 2.0f);
  const auto w = random_vector(size_t(out) * in, 9);
  std::vector<float> y(size_t(rows) * out, std::nanf(""));
  cpu::linear_f32_avx512(x.data(), rows, in, w.data(), 0, 80, out, y.data());
  cpu::linear_f32_avx512(x.data(), rows, in, w.data(), 80, 141, out, y.data());
  cpu::linear_f32_avx512(x.data(), rows, in, w.data(), 141, out, out, y.data());
  EXPECT_LT(worst_against_double(y, x, w, rows, in, out), 2e-5);
}

// The float32 AVX2 GEMM (where the CPU has AVX2 and FMA): the same cases against its 8 x 8
// packing transposes, 6-row tiles (a tail of 1 row) and 48-column blocks of 16-column panels
// (slices ending in each panel, mid-vector or not), and every row count of its tail. Each
// slice is written into a poisoned output of its own: no column outside it may change.
TEST(Kernels, LinearF32Avx2IsTheFloat32Gemm) {
  if (!cpu::f32_avx2_gemm_available()) GTEST_SKIP() << "this CPU has no AVX2 with FMA";
  const int rows = 37, in = 97, out = 150;
  const auto x = random_vector(size_t(rows) * in, 8, 2.0f);
  const auto w = random_vector(size_t(out) * in, 9);
  std::vector<float> y(size_t(rows) * out, std::nanf(""));
  for (const auto& [begin, end] : {std::pair{0, 80}, std::pair{80, 141}, std::pair{141, out}, std::pair{0, 40},
                                   std::pair{3, 94}, std::pair{16, 48}}) {
    std::vector<float> slice(size_t(rows) * out, std::nanf(""));
    cpu::linear_f32_avx2(x.data(), rows, in, w.data(), begin, end, out, slice.data());
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < out; ++c) {
        const float v = slice[size_t(r) * out + c];
        if (c < begin || c >= end) {
          ASSERT_TRUE(std::isnan(v)) << "column " << c << " outside [" << begin << ", " << end << ") written";
        } else {
          ASSERT_FALSE(std::isnan(v)) << "column " << c << " of [" << begin << ", " << end << ") not written";
          y[size_t(r) * out + c] = v;
        }
      }
  }
  EXPECT_LT(worst_against_double(y, x, w, rows, in, out), 2e-5);
  for (int few = 1; few <= 7; ++few) {
    std::vector<float> z(size_t(few) * out, std::nanf(""));
    cpu::linear_f32_avx2(x.data(), few, in, w.data(), 0, out, out, z.data());
    EXPECT_LT(worst_against_double(z, x, w, few, in, out), 2e-5) << few << " rows";
  }
}

// linear() takes whichever GEMM is in force for every row count (ours from 4 rows, OpenBLAS
// below): the same products on 1 to 9 rows, split over threads.
TEST(Kernels, LinearIsTheFloat32GemmAtEveryRowCount) {
  const int in = 40, out = 200;
  const auto w = random_vector(size_t(out) * in, 10);
  cpu::ThreadPool::instance().set_threads(3);
  for (int rows = 1; rows <= 9; ++rows) {
    const auto x = random_vector(size_t(rows) * in, 11 + rows, 2.0f);
    std::vector<float> y(size_t(rows) * out, std::nanf(""));
    cpu::linear(x.data(), rows, in, w.data(), out, y.data());
    EXPECT_LT(worst_against_double(y, x, w, rows, in, out), 1e-5) << rows << " rows";
  }
  cpu::ThreadPool::instance().set_threads(1);
}

// A bf16 pool rounds to nearest even on the way in and widens exactly on the way out.
TEST(Kernels, Bf16KvPoolRoundsOnWrite) {
  kv::PagedKvPool pool({2, 2, 8, 4, 2}, 4);
  pool.reserve(0, 6);
  const auto k = random_vector(6 * 16, 6), v = random_vector(6 * 16, 7);
  pool.write(1, 0, 0, 6, k.data(), 16, v.data(), 16);
  std::vector<float> row(8);
  for (int t = 0; t < 6; ++t)
    for (int h = 0; h < 2; ++h)
      for (bool value : {false, true}) {
        const int page = pool.pages(0)[t / 4];
        pool.load_rows(1, page, h, value, (t % 4) * 8, 8, row.data());
        for (int i = 0; i < 8; ++i)
          ASSERT_EQ(row[i], bf16::round((value ? v : k)[t * 16 + h * 8 + i])) << t << " " << h << " " << i;
      }
  EXPECT_THROW(pool.key_page(1, 0, 0), std::logic_error);  // a bf16 pool has no float pages
}
