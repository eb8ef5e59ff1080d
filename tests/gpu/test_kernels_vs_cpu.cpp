// Each CUDA kernel of kernels/ against the CPU backend's op (src/compute/cpu), on random
// data: bf16 tolerance (relative error <= 1e-2 in the 2-norm), NaN never passes, outputs
// poisoned with NaN first so an unwritten element fails. (Mixture-of-experts and latent
// attention kernels: test_moe_kernels_vs_cpu.cpp, test_latent_kernels_vs_cpu.cpp.)
//
// Built twice from these sources: gpu_kernel_tests (real kernels; skips itself without a
// device) and sim_kernel_tests (the same kernel code under the host simulator,
// tests/gpu/host_sim, so machines without a GPU run it too). No MPI, no HDF5.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <vector>

#include "compute/cpu/attention.hpp"
#include "compute/cpu/elementwise.hpp"
#include "compute/vocab_scores.hpp"
#include "kernel_checks.hpp"
#include "kvcache/paged_kv_pool.hpp"
#include "model/config.hpp"
#include "model/rope_frequencies.hpp"

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

TEST(Kernels, EmbeddingGather) {
  REQUIRE_DEVICE();
  const int vocab = 50, hidden = 96, count = 7;
  const std::vector<float> table = rounded(random_vector(size_t(vocab) * hidden, 1));
  const std::vector<int32_t> tokens = {3, 0, 49, 3, 17, 8, 25};
  std::vector<float> want(size_t(count) * hidden);
  cpu::embed(table.data(), hidden, tokens.data(), count, want.data());
  DeviceMemory<bf16> d_table(as_bf16(table));
  DeviceMemory<int32_t> d_tokens(tokens);
  DeviceMemory<float> d_out(std::vector<float>(want.size(), kNaN));
  kernels::embedding_gather(d_table.get(), hidden, d_tokens.get(), count, d_out.get(), nullptr);
  EXPECT_SYNCED();
  EXPECT_EQ(relative_error(d_out.read(), want), 0.0);  // a gather of bf16 values is exact
}

TEST(Kernels, RmsNormRows) {
  REQUIRE_DEVICE();
  const int rows = 5, width = 300, stride = 320;
  const std::vector<float> x = random_vector(size_t(rows) * stride, 2, 3.0f);
  const std::vector<float> weight = rounded(random_vector(width, 3));
  std::vector<float> want(size_t(rows) * width);
  cpu::rms_norm(x.data(), rows, width, stride, weight.data(), 1e-5f, want.data(), width);
  DeviceMemory<float> d_x(x);
  DeviceMemory<bf16> d_w(as_bf16(weight));
  DeviceMemory<bf16> d_y(as_bf16(std::vector<float>(want.size(), kNaN)));
  kernels::rms_norm_rows(d_x.get(), rows, width, stride, d_w.get(), 1e-5f, d_y.get(), width, nullptr);
  EXPECT_SYNCED();
  EXPECT_LE(relative_error(as_float(d_y.read()), want), kBf16Tolerance);
}

TEST(Kernels, RmsNormHeadsInPlace) {
  REQUIRE_DEVICE();
  const int rows = 6, heads = 3, d = 48, stride = heads * d + 40;
  std::vector<float> x = random_vector(size_t(rows) * stride, 4, 2.0f);
  const std::vector<float> weight = rounded(random_vector(d, 5));
  std::vector<float> want = x;
  for (int r = 0; r < rows; ++r)
    cpu::rms_norm(want.data() + size_t(r) * stride, heads, d, d, weight.data(), 1e-6f, want.data() + size_t(r) * stride,
                  d);
  DeviceMemory<float> d_x(x);
  DeviceMemory<bf16> d_w(as_bf16(weight));
  kernels::rms_norm_heads(d_x.get(), rows, heads, d, stride, d_w.get(), 1e-6f, nullptr);
  EXPECT_SYNCED();
  EXPECT_LE(relative_error(d_x.read(), want), 1e-5);  // float in, float out
}

// Positions far past 2^24 / inv_freq: float angles would be wrong by radians.
TEST(Kernels, RopeLlama3ScalingAtLongPositions) {
  REQUIRE_DEVICE();
  model::ModelConfig c;
  c.head_dim = 64;
  c.rope_theta = 500000;
  c.rope_scaling.llama3 = true;
  c.rope_scaling.factor = 8;
  const std::vector<double> inv_freq = model::rope_inv_freq(c);
  const int rows = 9, q_heads = 4, k_heads = 2, d = 64, stride = (q_heads + 2 * k_heads) * d;
  for (const int64_t pos0 : {int64_t{0}, int64_t{1000003}}) {
    std::vector<float> x = random_vector(size_t(rows) * stride, 6);
    std::vector<float> want = x;
    cpu::apply_rope(want.data(), rows, stride, q_heads, d, static_cast<int>(pos0), inv_freq);
    cpu::apply_rope(want.data() + q_heads * d, rows, stride, k_heads, d, static_cast<int>(pos0), inv_freq);
    DeviceMemory<float> d_x(x);
    DeviceMemory<double> d_freq(inv_freq);
    kernels::rope(d_x.get(), rows, stride, q_heads, k_heads, q_heads * d, d, pos0, d_freq.get(), 1.0f, nullptr);
    EXPECT_SYNCED();
    EXPECT_LE(relative_error(d_x.read(), want), 1e-5) << "pos0 " << pos0;
  }
}

TEST(Kernels, Swiglu) {
  REQUIRE_DEVICE();
  const int rows = 4, width = 130;
  const std::vector<float> gate_up = random_vector(size_t(rows) * 2 * width, 7, 4.0f);
  std::vector<float> want(size_t(rows) * width);
  cpu::swiglu(gate_up.data(), rows, width, want.data());
  DeviceMemory<float> d_in(gate_up);
  DeviceMemory<bf16> d_out(as_bf16(std::vector<float>(want.size(), kNaN)));
  kernels::swiglu(d_in.get(), rows, width, d_out.get(), nullptr);
  EXPECT_SYNCED();
  EXPECT_LE(relative_error(as_float(d_out.read()), want), kBf16Tolerance);
}

TEST(Kernels, ResidualAddAlignedAndNot) {
  REQUIRE_DEVICE();
  for (const int64_t n : {int64_t{1024}, int64_t{1023}}) {
    const std::vector<float> h = random_vector(n, 8), delta = random_vector(n, 9);
    std::vector<float> want = h;
    cpu::add_inplace(want.data(), delta.data(), n);
    DeviceMemory<float> d_h(h), d_delta(delta);
    kernels::residual_add(d_h.get(), d_delta.get(), n, nullptr);
    EXPECT_SYNCED();
    EXPECT_EQ(relative_error(d_h.read(), want), 0.0) << n;
  }
}

TEST(Kernels, BiasAddStrided) {
  REQUIRE_DEVICE();
  const int rows = 3, width = 70, stride = 80;
  const std::vector<float> x = random_vector(size_t(rows) * stride, 10);
  const std::vector<float> bias = rounded(random_vector(width, 11));
  std::vector<float> want = x;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < width; ++c) want[size_t(r) * stride + c] += bias[c];
  DeviceMemory<float> d_x(x);
  DeviceMemory<bf16> d_b(as_bf16(bias));
  kernels::bias_add(d_x.get(), rows, width, stride, d_b.get(), nullptr);
  EXPECT_SYNCED();
  EXPECT_LE(relative_error(d_x.read(), want), 1e-7);
}

TEST(Kernels, ConvertAndFill) {
  REQUIRE_DEVICE();
  const std::vector<float> x = random_vector(1000, 12, 100.0f);
  DeviceMemory<float> d_x(x);
  DeviceMemory<bf16> d_y(1000);
  kernels::float_to_bf16(d_x.get(), d_y.get(), 1000, nullptr);
  DeviceMemory<bf16> d_fill(4096);
  kernels::fill_uniform_bf16(d_fill.get(), 4096, 42, 0.5f, nullptr);
  EXPECT_SYNCED();
  EXPECT_EQ(relative_error(as_float(d_y.read()), rounded(x)), 0.0);
  const std::vector<float> filled = as_float(d_fill.read());
  double sum = 0, lo = 1, hi = -1;
  for (float v : filled) {
    sum += v;
    lo = std::min<double>(lo, v);
    hi = std::max<double>(hi, v);
  }
  EXPECT_LT(std::abs(sum / filled.size()), 0.05);  // centred
  EXPECT_GE(lo, -0.5);
  EXPECT_LE(hi, 0.5);
  EXPECT_LT(lo, -0.45);  // and spread over the range
  EXPECT_GT(hi, 0.45);
}

struct AttentionCase {
  int head_dim, heads, kv_heads, page_size, pos0, tokens;
};

std::ostream& operator<<(std::ostream& os, const AttentionCase& c) {
  return os << "head_dim " << c.head_dim << ", heads " << c.heads << "/" << c.kv_heads << ", page " << c.page_size
            << ", prefix " << c.pos0 << ", tokens " << c.tokens;
}

class ChunkAttention : public ::testing::TestWithParam<AttentionCase> {};

// K/V appended to pages (kv_append, a scrambled page table), then the chunk's queries
// against the prefix and themselves; the CPU backend sees the same bf16-rounded K/V.
TEST_P(ChunkAttention, MatchesCpuBackend) {
  REQUIRE_DEVICE();
  const AttentionCase c = GetParam();
  const int d = c.head_dim, kv_len = c.pos0 + c.tokens, kv_width = c.kv_heads * d, layers = 2, layer = 1;
  const std::vector<float> k = rounded(random_vector(size_t(kv_len) * kv_width, 20 + d));
  const std::vector<float> v = rounded(random_vector(size_t(kv_len) * kv_width, 40 + d));
  const int q_stride = c.heads * d + 16;  // strided rows, as inside the fused qkv buffer
  const std::vector<float> q = random_vector(size_t(c.tokens) * q_stride, 60 + d, 2.0f);

  // CPU backend.
  const int pages = (kv_len + c.page_size - 1) / c.page_size;
  kv::PagedKvPool pool({layers, c.kv_heads, d, c.page_size}, pages + 2);
  pool.reserve(0, kv_len);
  pool.write(layer, 0, 0, kv_len, k.data(), kv_width, v.data(), kv_width);
  std::vector<float> want(size_t(c.tokens) * c.heads * d);
  cpu::AttentionWorkspace ws;
  cpu::chunk_attention(q.data(), q_stride, c.tokens, c.pos0, {&pool, layer, &pool.pages(0)}, c.heads, want.data(),
                       c.heads * d, ws);

  // Kernels: pages in reverse order, so paging errors cannot hide.
  std::vector<int32_t> table(pages);
  for (int p = 0; p < pages; ++p) table[p] = pages + 1 - p;
  kernels::PagedKv kv;
  kv.layers = layers;
  kv.kv_heads = c.kv_heads;
  kv.head_dim = d;
  kv.page_size = c.page_size;
  DeviceMemory<bf16> d_cache(as_bf16(std::vector<float>(size_t(pages + 2) * layers * kv.page_layer_elements(), kNaN)));
  DeviceMemory<int32_t> d_table(table);
  kv.base = d_cache.get();
  kv.page_table = d_table.get();
  DeviceMemory<float> d_k(k), d_v(v), d_q(q);
  kernels::kv_append(kv, layer, 0, kv_len, d_k.get(), d_v.get(), kv_width, nullptr);
  DeviceMemory<bf16> d_out(as_bf16(std::vector<float>(want.size(), kNaN)));
  kernels::AttentionArgs args;
  args.q = d_q.get();
  args.q_stride = q_stride;
  args.tokens = c.tokens;
  args.pos0 = c.pos0;
  args.heads = c.heads;
  args.kv = kv;
  args.layer = layer;
  args.out = d_out.get();
  args.out_stride = c.heads * d;
  ASSERT_TRUE(kernels::attention_supports(d, c.page_size));
  kernels::chunk_attention(args, nullptr);
  EXPECT_SYNCED();
  EXPECT_LE(relative_error(as_float(d_out.read()), want), kBf16Tolerance);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ChunkAttention,
                         ::testing::Values(AttentionCase{128, 4, 2, 64, 0, 70},     // fresh prompt, GQA
                                           AttentionCase{128, 2, 2, 128, 150, 40},  // prefix, MHA, 128-token pages
                                           AttentionCase{64, 4, 1, 64, 64, 64},     // aligned chunk after one page
                                           AttentionCase{48, 2, 1, 64, 30, 90},     // Qwen3-tiny head size
                                           AttentionCase{32, 4, 2, 64, 200, 1},     // one query (decode-like)
                                           AttentionCase{128, 2, 1, 64, 10, 200}),  // two query blocks, GQA
                         [](const ::testing::TestParamInfo<AttentionCase>& info) {
                           const AttentionCase& c = info.param;
                           return "d" + std::to_string(c.head_dim) + "_h" + std::to_string(c.heads) + "x" +
                                  std::to_string(c.kv_heads) + "_page" + std::to_string(c.page_size) + "_prefix" +
                                  std::to_string(c.pos0) + "_t" + std::to_string(c.tokens);
                         });

// The device's row summaries (--logprobs, --top-k, --token-ids) against the host's, row for
// row: the same max, target and candidate count, the sum to double rounding, the same k best
// after the merge (ids included) and the same token-set slots, on rows built to catch the
// select's corner cases.
void check_vocab_summaries(const std::vector<float>& logits, int rows, int count, int vocab_begin,
                           const std::vector<int32_t>& targets, int k, const std::vector<int32_t>& token_set = {}) {
  const int set_size = static_cast<int>(token_set.size());
  const compute::SummaryShape shape{k, token_set.data(), set_size};
  const size_t stride = compute::row_summary_bytes(shape);
  std::vector<std::byte> want(stride * rows);
  for (int r = 0; r < rows; ++r)
    compute::summarize_row_slice(logits.data() + size_t(r) * count, count, vocab_begin, targets[r], shape,
                                 want.data() + r * stride);
  DeviceMemory<float> d_logits(logits);
  DeviceMemory<int32_t> d_targets(targets);
  DeviceMemory<int32_t> d_set(token_set.empty() ? std::vector<int32_t>{-1} : token_set);
  DeviceMemory<unsigned char> d_records(std::vector<unsigned char>(stride * rows, 0xff));
  kernels::vocab_summaries(d_logits.get(), rows, count, vocab_begin, d_targets.get(), k, d_set.get(), set_size,
                           d_records.get(), nullptr);
  EXPECT_SYNCED();
  const std::vector<unsigned char> got_bytes = d_records.read();
  const auto* got = reinterpret_cast<const std::byte*>(got_bytes.data());
  for (int r = 0; r < rows; ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    compute::RowSummaryHeader a, b;
    std::memcpy(&a, got + r * stride, sizeof a);
    std::memcpy(&b, want.data() + r * stride, sizeof b);
    EXPECT_EQ(a.max, b.max);
    EXPECT_EQ(a.has_target, b.has_target);
    if (b.has_target) {
      EXPECT_EQ(a.target_logit, b.target_logit);
    }
    EXPECT_EQ(a.candidates, b.candidates);
    if (std::isnan(b.sum_exp))
      EXPECT_TRUE(std::isnan(a.sum_exp));
    else
      // The device sums exp in double, the host float exps (2e-7 each) in double lanes:
      // 1e-6 of the sum is 1e-6 nats in a log-prob, below float32's resolution there.
      EXPECT_NEAR(a.sum_exp, b.sum_exp, 1e-6 * b.sum_exp);
    for (int j = 0; j < set_size; ++j) {  // the slice's logit, or NaN: bit for bit
      float slot_a, slot_b;
      std::memcpy(&slot_a, got + r * stride + compute::set_slots_offset(k) + 4 * j, 4);
      std::memcpy(&slot_b, want.data() + r * stride + compute::set_slots_offset(k) + 4 * j, 4);
      EXPECT_TRUE(slot_a == slot_b || (std::isnan(slot_a) && std::isnan(slot_b))) << "set entry " << j;
    }
    float lp_a = 0, lp_b = 0;
    std::vector<float> top_a(k), top_b(k);
    std::vector<int32_t> ids_a(k), ids_b(k);
    compute::merge_row_summaries(got + r * stride, 1, stride, shape, {&lp_a, top_a.data(), ids_a.data(), nullptr});
    compute::merge_row_summaries(want.data() + r * stride, 1, stride, shape,
                                 {&lp_b, top_b.data(), ids_b.data(), nullptr});
    EXPECT_EQ(ids_a, ids_b);
    for (int j = 0; j < k; ++j)
      if (top_a[j] != top_b[j]) {  // equal infinities pass; NaN never does
        EXPECT_NEAR(top_a[j], top_b[j], 1e-6f);
      }
  }
}

TEST(Kernels, VocabSummariesMatchTheHost) {
  REQUIRE_DEVICE();
  const int count = 700, vocab_begin = 1000;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> rows;
  rows.push_back(random_vector(count, 21, 4.0f));  // plain
  std::vector<float> ties = random_vector(count, 22, 2.0f);
  for (float& x : ties) x = std::round(x);  // five values: ties at the k-th place
  rows.push_back(ties);
  std::vector<float> zeros(count, 0.0f);
  for (int i = 0; i < count; i += 3) zeros[i] = -0.0f;  // -0 and +0 are equal logits
  rows.push_back(zeros);
  std::vector<float> with_nan = random_vector(count, 23);
  with_nan[400] = kNaN;
  rows.push_back(with_nan);
  std::vector<float> with_inf = random_vector(count, 24);
  with_inf[5] = inf;
  rows.push_back(with_inf);
  std::vector<float> with_minus_inf = random_vector(count, 25);
  for (int i = 0; i < count; i += 2) with_minus_inf[i] = -inf;
  rows.push_back(with_minus_inf);
  std::vector<float> negative = random_vector(count, 26);
  for (float& x : negative) x = -100.0f - std::abs(x);
  negative[699] = -1.0f;  // the best in the last thread's run
  rows.push_back(negative);
  std::vector<float> logits;
  for (const auto& row : rows) logits.insert(logits.end(), row.begin(), row.end());
  const int n = static_cast<int>(rows.size());
  // Targets in the slice (first, last, middle), outside it, and none.
  const std::vector<int32_t> targets = {vocab_begin,     vocab_begin + count - 1, 5, -1, vocab_begin + 400,
                                        vocab_begin + 5, vocab_begin + 699};
  for (int k : {0, 1, 5, 64}) {
    SCOPED_TRACE("k " + std::to_string(k));
    check_vocab_summaries(logits, n, count, vocab_begin, targets, k);
  }
  // A token set inside the slice, at its ends, and outside it (an odd size: padded records).
  check_vocab_summaries(logits, n, count, vocab_begin, targets, 5,
                        {vocab_begin + 3, 7, vocab_begin, vocab_begin + count - 1, vocab_begin + count});
  // A slice smaller than k: every token is a candidate.
  const std::vector<float> small = random_vector(3 * 10, 27);
  check_vocab_summaries(small, 3, 10, 0, {0, 9, -1}, 16);
}

}  // namespace
