// The multi-head latent attention kernels against the CPU backend's MLA
// (src/compute/cpu/latent_attention.cpp) on the same inputs: RoPE on the rope parts with
// YaRN's factor on cos and sin, the latent rows into the paged cache, the attention over
// the latent cache (against cpu::chunk_attention_scaled on a latent pool, several widths up
// to DeepSeek-V3's 576), and the absorbed attention as a whole (the per-head W_UK / W_UV
// GEMMs on the host between the kernels) against cpu::latent_attention.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "compute/cpu/attention.hpp"
#include "compute/cpu/elementwise.hpp"
#include "compute/cpu/gemm.hpp"
#include "compute/cpu/latent_attention.hpp"
#include "kernel_checks.hpp"
#include "kvcache/paged_kv_pool.hpp"
#include "model/config.hpp"
#include "model/rope_frequencies.hpp"
#include "model/weights.hpp"

using namespace pf;
using kernels::bf16;
using test::as_bf16;
using test::as_float;
using test::DeviceMemory;
using test::kBf16Tolerance;
using test::kNaN;
using test::random_vector;
using test::relative_error;
using test::rounded;

namespace {

// A small DeepSeek-V3 (tests/unit/test_moe.cpp's), YaRN with an attention factor that is not 1.
model::ModelConfig deepseek_config() {
  const nlohmann::json j = {{"architectures", {"DeepseekV3ForCausalLM"}},
                            {"hidden_size", 64},
                            {"num_hidden_layers", 2},
                            {"num_attention_heads", 4},
                            {"num_key_value_heads", 4},
                            {"vocab_size", 97},
                            {"intermediate_size", 96},
                            {"num_experts_per_tok", 2},
                            {"n_routed_experts", 8},
                            {"moe_intermediate_size", 32},
                            {"n_group", 4},
                            {"topk_group", 2},
                            {"q_lora_rank", 32},
                            {"kv_lora_rank", 16},
                            {"qk_nope_head_dim", 16},
                            {"qk_rope_head_dim", 8},
                            {"v_head_dim", 16},
                            {"rope_scaling",
                             {{"type", "yarn"},
                              {"factor", 40.0},
                              {"original_max_position_embeddings", 4096},
                              {"beta_fast", 32},
                              {"beta_slow", 1},
                              {"mscale", 1.0},
                              {"mscale_all_dim", 0.707}}}};
  return model::parse_config(j, "deepseek test config");
}

// A device latent cache of `pages` pages (+2 spare), its page table the pages in reverse
// order so that paging errors cannot hide.
struct DeviceLatentCache {
  DeviceLatentCache(int layers, int width, int page_size, int pages)
      : cache(as_bf16(std::vector<float>(size_t(pages + 2) * layers * page_size * width, kNaN))),
        table(reversed(pages)) {
    kv.base = cache.get();
    kv.page_table = table.get();
    kv.layers = layers;
    kv.kv_heads = 1;
    kv.head_dim = width;
    kv.page_size = page_size;
    kv.latent = true;
  }
  static std::vector<int32_t> reversed(int pages) {
    std::vector<int32_t> t(pages);
    for (int p = 0; p < pages; ++p) t[p] = pages + 1 - p;
    return t;
  }
  DeviceMemory<bf16> cache;
  DeviceMemory<int32_t> table;
  kernels::PagedKv kv;
};

// cos and sin scaled by YaRN's factor, on MLA's rope parts (every query head's tail and the
// latent row's rope key) and on dense q/k heads, at a short and a long position.
TEST(LatentKernels, RopeOnRopePartsWithYarnFactor) {
  REQUIRE_DEVICE();
  const model::ModelConfig c = deepseek_config();
  const model::MlaConfig& m = c.mla;
  const std::vector<double> inv_freq = model::rope_inv_freq(c);
  const float scale = model::rope_scale(c);
  ASSERT_NE(scale, 1.0f);  // the factor is exercised
  const int rows = 11, heads = c.num_heads, q_width = heads * c.head_dim, width = m.latent_width();
  for (const int pos0 : {0, 1000003}) {
    std::vector<float> q = random_vector(size_t(rows) * q_width, 1), want_q = q;
    cpu::LatentWorkspace ws;
    ws.latent = random_vector(size_t(rows) * width, 2);
    const std::vector<float> latent = ws.latent;
    cpu::latent_rope(want_q.data(), rows, c, heads, pos0, inv_freq, scale, ws.latent.data());
    DeviceMemory<float> d_q(q), d_latent(latent);
    DeviceMemory<double> d_freq(inv_freq);
    kernels::rope_heads(d_q.get() + m.qk_nope_head_dim, rows, q_width, heads, c.head_dim, m.qk_rope_head_dim, pos0,
                        d_freq.get(), scale, nullptr);
    kernels::rope_heads(d_latent.get() + m.kv_lora_rank, rows, width, 1, 0, m.qk_rope_head_dim, pos0, d_freq.get(),
                        scale, nullptr);
    EXPECT_SYNCED();
    const double q_error = relative_error(d_q.read(), want_q),
                 latent_error = relative_error(d_latent.read(), ws.latent);
    EXPECT_LE(q_error, 1e-5) << "pos0 " << pos0;
    EXPECT_LE(latent_error, 1e-5) << "pos0 " << pos0;
    RecordProperty("q_relative_error_pos" + std::to_string(pos0), test::scientific(q_error));
    RecordProperty("latent_relative_error_pos" + std::to_string(pos0), test::scientific(latent_error));

    // The dense launcher takes the same factor (a YaRN-scaled Qwen, say).
    const int q_heads = 3, k_heads = 1, d = m.qk_rope_head_dim, stride = (q_heads + 2 * k_heads) * d;
    std::vector<float> x = random_vector(size_t(rows) * stride, 3), want_x = x;
    cpu::apply_rope(want_x.data(), rows, stride, q_heads + k_heads, d, pos0, inv_freq, scale);
    DeviceMemory<float> d_x(x);
    kernels::rope(d_x.get(), rows, stride, q_heads, k_heads, q_heads * d, d, pos0, d_freq.get(), scale, nullptr);
    EXPECT_SYNCED();
    const double dense_error = relative_error(d_x.read(), want_x);
    EXPECT_LE(dense_error, 1e-5) << "pos0 " << pos0;
    RecordProperty("dense_relative_error_pos" + std::to_string(pos0), test::scientific(dense_error));
  }
}

// kv_append on a latent cache writes each token's one row, as bf16, where the cpu pool
// writes it (and no V half: the cache is one row per token per page slot).
TEST(LatentKernels, AppendWritesTheLatentRows) {
  REQUIRE_DEVICE();
  const int layers = 2, layer = 1, width = 24, page_size = 16, pos0 = 21, count = 30, stride = width + 8;
  const int pages = (pos0 + count + page_size - 1) / page_size;
  const std::vector<float> rows = random_vector(size_t(count) * stride, 7);
  kv::PagedKvPool pool({layers, 1, width, page_size, 4, true}, pages);
  pool.reserve(0, pos0 + count);
  pool.write(layer, 0, pos0, count, rows.data(), stride, nullptr, 0);

  DeviceLatentCache cache(layers, width, page_size, pages);
  DeviceMemory<float> d_rows(rows);
  kernels::kv_append(cache.kv, layer, pos0, count, d_rows.get(), nullptr, stride, nullptr);
  EXPECT_SYNCED();
  const std::vector<float> stored = as_float(cache.cache.read());
  const std::vector<int32_t> table = cache.table.read();
  size_t written = 0;
  for (int pos = pos0; pos < pos0 + count; ++pos) {
    const float* want = pool.key_page(layer, pool.pages(0)[pos / page_size], 0) + (pos % page_size) * width;
    // A latent page of a layer: page_size rows of `width`, nothing else.
    const size_t at = ((size_t(table[pos / page_size]) * layers + layer) * page_size + pos % page_size) * width;
    for (int c = 0; c < width; ++c)
      ASSERT_EQ(stored[at + c], test::bf16_round(want[c])) << "pos " << pos << " col " << c;
  }
  for (float v : stored) written += !std::isnan(v);
  EXPECT_EQ(written, size_t(count) * width);  // nothing else: no V half, no other layer
}

struct LatentCase {
  int value_width, rope, heads, page_size, pos0, tokens;
};

std::ostream& operator<<(std::ostream& os, const LatentCase& c) {
  return os << "latent " << c.value_width << " + rope " << c.rope << ", heads " << c.heads << ", page " << c.page_size
            << ", prefix " << c.pos0 << ", tokens " << c.tokens;
}

class LatentAttention : public ::testing::TestWithParam<LatentCase> {};

// The kernel against cpu::chunk_attention_scaled over the same (bf16) latent rows: every
// head reads the one cached row per token as its key, and the row's latent part as its value.
TEST_P(LatentAttention, MatchesCpuScaledAttentionOnALatentPool) {
  REQUIRE_DEVICE();
  const LatentCase c = GetParam();
  const int width = c.value_width + c.rope, kv_len = c.pos0 + c.tokens, layers = 2, layer = 1;
  const int pages = (kv_len + c.page_size - 1) / c.page_size;
  const float scale = 0.7f / std::sqrt(static_cast<float>(width));
  const std::vector<float> latent = rounded(random_vector(size_t(kv_len) * width, 80 + width));
  const int q_stride = c.heads * width + 8;
  const std::vector<float> q = random_vector(size_t(c.tokens) * q_stride, 90 + width, 2.0f);

  kv::PagedKvPool pool({layers, 1, width, c.page_size, 4, true}, pages + 2);
  pool.reserve(0, kv_len);
  pool.write(layer, 0, 0, kv_len, latent.data(), width, nullptr, 0);
  std::vector<float> full(size_t(c.tokens) * c.heads * width);
  cpu::AttentionWorkspace ws;
  cpu::chunk_attention_scaled(q.data(), q_stride, c.tokens, c.pos0, {&pool, layer, &pool.pages(0)}, c.heads, scale,
                              full.data(), c.heads * width, ws);
  std::vector<float> want(size_t(c.tokens) * c.heads * c.value_width);  // the values are the latent part
  for (int t = 0; t < c.tokens; ++t)
    for (int h = 0; h < c.heads; ++h)
      for (int i = 0; i < c.value_width; ++i)
        want[(size_t(t) * c.heads + h) * c.value_width + i] = full[(size_t(t) * c.heads + h) * width + i];

  DeviceLatentCache cache(layers, width, c.page_size, pages);
  DeviceMemory<float> d_latent(latent), d_q(q);
  kernels::kv_append(cache.kv, layer, 0, kv_len, d_latent.get(), nullptr, width, nullptr);
  DeviceMemory<bf16> d_out(as_bf16(std::vector<float>(want.size(), kNaN)));
  kernels::LatentAttentionArgs args;
  args.q = d_q.get();
  args.q_stride = q_stride;
  args.tokens = c.tokens;
  args.pos0 = c.pos0;
  args.heads = c.heads;
  args.kv = cache.kv;
  args.layer = layer;
  args.scale = scale;
  args.value_width = c.value_width;
  args.out = d_out.get();
  args.out_stride = c.heads * c.value_width;
  ASSERT_LE(width, kernels::latent_attention_max_width());
  kernels::latent_attention(args, nullptr);
  EXPECT_SYNCED();
  const double error = relative_error(as_float(d_out.read()), want);
  EXPECT_LE(error, kBf16Tolerance);
  RecordProperty("relative_error", test::scientific(error));
}

INSTANTIATE_TEST_SUITE_P(Shapes, LatentAttention,
                         ::testing::Values(LatentCase{16, 8, 4, 16, 0, 40},     // the test model's rows, fresh prompt
                                           LatentCase{16, 8, 2, 64, 100, 20},   // prefix across pages, two query blocks
                                           LatentCase{32, 8, 3, 32, 33, 1},     // one query
                                           LatentCase{40, 16, 1, 16, 5, 50},    // widths not multiples of 32
                                           LatentCase{512, 64, 2, 32, 40, 9}),  // DeepSeek-V3's 576-wide rows
                         [](const ::testing::TestParamInfo<LatentCase>& info) {
                           const LatentCase& c = info.param;
                           return "w" + std::to_string(c.value_width) + "_" + std::to_string(c.rope) + "_h" +
                                  std::to_string(c.heads) + "_page" + std::to_string(c.page_size) + "_prefix" +
                                  std::to_string(c.pos0) + "_t" + std::to_string(c.tokens);
                         });

// The absorbed attention as LatentOnGpu runs it: queries split, q_nope . W_UK per head (on
// the host here), attention over the latent cache, latent output . W_UV^T per head (host),
// against cpu::latent_attention on the same q, latent rows and kv_b.
TEST(LatentKernels, AbsorbedAttentionMatchesCpuLatentAttention) {
  REQUIRE_DEVICE();
  const model::ModelConfig c = deepseek_config();
  const model::MlaConfig& m = c.mla;
  const int heads = c.num_heads, qk = c.head_dim, nope = m.qk_nope_head_dim, rope = m.qk_rope_head_dim;
  const int rank = m.kv_lora_rank, v = m.v_head_dim, width = m.latent_width();
  const int pos0 = 35, tokens = 20, kv_len = pos0 + tokens, page_size = 16, layers = 1, layer = 0;
  const int pages = (kv_len + page_size - 1) / page_size;
  model::LayerWeights w;
  w.kv_b = rounded(random_vector(size_t(heads) * (nope + v) * rank, 11, 0.4f));
  const std::vector<float> q = random_vector(size_t(tokens) * heads * qk, 12, 1.5f);
  const std::vector<float> latent = rounded(random_vector(size_t(kv_len) * width, 13));

  kv::PagedKvPool pool({layers, 1, width, page_size, 4, true}, pages);
  pool.reserve(0, kv_len);
  pool.write(layer, 0, 0, kv_len, latent.data(), width, nullptr, 0);
  std::vector<float> want(size_t(tokens) * heads * v);
  cpu::LatentWorkspace ws;
  cpu::latent_attention(q.data(), tokens, pos0, {&pool, layer, &pool.pages(0)}, c, heads, w, want.data(), ws);

  DeviceLatentCache cache(layers, width, page_size, pages);
  DeviceMemory<float> d_latent(latent), d_q(q);
  kernels::kv_append(cache.kv, layer, 0, kv_len, d_latent.get(), nullptr, width, nullptr);
  DeviceMemory<bf16> d_q_nope(as_bf16(std::vector<float>(size_t(tokens) * heads * nope, kNaN)));
  DeviceMemory<float> d_absorbed(std::vector<float>(size_t(tokens) * heads * width, kNaN));
  kernels::split_latent_queries(d_q.get(), heads * qk, tokens, heads, nope, rope, rank, d_q_nope.get(),
                                d_absorbed.get(), nullptr);
  EXPECT_SYNCED();
  // q_absorbed[:, head, :rank] = q_nope(head) . W_UK(head): kv_b's nope rows of the head, [nope, rank].
  const std::vector<float> q_nope = as_float(d_q_nope.read());
  std::vector<float> absorbed = d_absorbed.read();
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h)
      for (int r = 0; r < rank; ++r) {
        float sum = 0;
        for (int n = 0; n < nope; ++n)
          sum += q_nope[(size_t(t) * heads + h) * nope + n] * w.kv_b[(size_t(h) * (nope + v) + n) * rank + r];
        absorbed[(size_t(t) * heads + h) * width + r] = sum;
      }
  d_absorbed.put(absorbed);
  DeviceMemory<bf16> d_out_latent(as_bf16(std::vector<float>(size_t(tokens) * heads * rank, kNaN)));
  kernels::LatentAttentionArgs args;
  args.q = d_absorbed.get();
  args.q_stride = heads * width;
  args.tokens = tokens;
  args.pos0 = pos0;
  args.heads = heads;
  args.kv = cache.kv;
  args.layer = layer;
  args.scale = static_cast<float>(c.softmax_scale());
  args.value_width = rank;
  args.out = d_out_latent.get();
  args.out_stride = heads * rank;
  kernels::latent_attention(args, nullptr);
  EXPECT_SYNCED();
  // out(head) = out_latent(head) . W_UV(head)^T: kv_b's v rows of the head, [v, rank].
  const std::vector<float> out_latent = as_float(d_out_latent.read());
  std::vector<float> got(want.size());
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < v; ++i) {
        float sum = 0;
        for (int r = 0; r < rank; ++r)
          sum +=
              out_latent[(size_t(t) * heads + h) * rank + r] * w.kv_b[(size_t(h) * (nope + v) + nope + i) * rank + r];
        got[(size_t(t) * heads + h) * v + i] = sum;
      }
  const double error = relative_error(got, want);
  EXPECT_LE(error, kBf16Tolerance);
  RecordProperty("relative_error", test::scientific(error));
}

}  // namespace
