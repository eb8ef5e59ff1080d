// The CUDA backend's pieces that only a GPU can run (cuBLASLt, the whole stage), against
// the CPU backend on the same bf16 weights: GEMMs (plain and batched over head slices), and
// a prompt prefilled in three chunks through every layer of tiny / Qwen2 / Qwen3 / small
// presets. Skips itself without a device.
#include <gtest/gtest.h>

#include <cmath>

#include "compute/cpu/gemm.hpp"
#include "compute/cuda/cuda_stage_compute.hpp"
#include "compute/cuda/lt_gemm.hpp"
#include "compute/cpu/cpu_stage_compute.hpp"
#include "device_memory.hpp"
#include "support/test_data.hpp"
#include "model/model_source.hpp"
#include "model/weights.hpp"

using namespace pf;

namespace {

#define REQUIRE_DEVICE()                                        \
  do {                                                          \
    const std::string reason = test::no_device_reason();        \
    if (!reason.empty()) GTEST_SKIP() << "skipped: " << reason; \
  } while (0)

void round_all(std::vector<float>& v) { v = test::rounded(std::move(v)); }
std::vector<float> random_bf16_vector(size_t n, uint32_t seed) { return test::rounded(test::random_vector(n, seed)); }
using test::relative_error;

TEST(LtGemm, MatchesCpuLinear) {
  REQUIRE_DEVICE();
  const int rows = 37, in = 96, out = 130;
  const auto x = random_bf16_vector(size_t(rows) * in, 1), w = random_bf16_vector(size_t(out) * in, 2);
  std::vector<float> want(size_t(rows) * out);
  cpu::linear(x.data(), rows, in, w.data(), out, want.data());
  test::DeviceMemory<kernels::bf16> d_x(cuda::to_bf16(x)), d_w(cuda::to_bf16(w));
  test::DeviceMemory<float> d_y(std::vector<float>(want.size(), std::nanf("")));
  cuda::LtGemm gemm;
  gemm.linear(d_x.get(), rows, in, d_w.get(), out, d_y.get(), nullptr);
  ASSERT_EQ(test::sync_device(), "");
  EXPECT_LE(relative_error(d_y.read(), want), 1e-5);  // bf16 products are exact in float
  gemm.linear(d_x.get(), rows, in, d_w.get(), out, d_y.get(), nullptr, /*beta=*/1.0f);  // y += x w^T
  ASSERT_EQ(test::sync_device(), "");
  for (auto& v : want) v *= 2;
  EXPECT_LE(relative_error(d_y.read(), want), 1e-5);
}

class CudaStage : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaStage, PrefillInChunksMatchesCpuBackend) {
  REQUIRE_DEVICE();
  const model::ModelSource source = model::open_model(std::string("synthetic:") + GetParam(), 5);
  const model::ModelConfig& c = source.config;
  const model::ShardSpec shard = model::make_shard_spec(c, 1, 0);
  model::StageWeights weights =
      model::load_stage_weights(c, *source.tensors, {0, c.num_layers}, true, true, shard);
  // Both backends on the same (bf16) weights: the comparison measures activations only.
  round_all(weights.embedding);
  round_all(weights.final_norm);
  round_all(weights.lm_head);
  for (auto& l : weights.layers)
    for (auto* t : {&l.input_norm, &l.qkv, &l.qkv_bias, &l.q_norm, &l.k_norm, &l.o, &l.post_norm, &l.gate_up, &l.down})
      round_all(*t);

  const int page = 64, length = 150, h = c.hidden_size;
  const int chunks[][2] = {{0, 64}, {64, 128}, {128, length}};
  std::vector<int32_t> tokens(length);
  for (int i = 0; i < length; ++i) tokens[i] = (i * 37 + 11) % c.vocab_size;

  kv::PagedKvPool pool({c.num_layers, shard.kv_heads, c.head_dim, page}, 4);
  compute::CpuStageCompute cpu(c, shard, weights, pool);
  cuda::CudaStageCompute gpu(c, shard, cuda::DeviceWeights::upload(weights), page, 64);
  gpu.allocate_kv(4);

  std::vector<float> cpu_hidden, cpu_logits(shard.vocab_count), gpu_logits(shard.vocab_count);
  test::DeviceMemory<float> gpu_hidden(size_t(64) * h);
  for (const auto& chunk : chunks) {
    const int t = chunk[1] - chunk[0];
    cpu_hidden.assign(size_t(t) * h, 0);
    cpu.embed(tokens.data() + chunk[0], t, cpu_hidden.data());
    cpu.forward({0, chunk[0], t}, cpu_hidden.data());
    gpu.embed(tokens.data() + chunk[0], t, gpu_hidden.get());
    gpu.forward({0, chunk[0], t}, gpu_hidden.get());
  }
  const int last = chunks[2][1] - chunks[2][0] - 1;
  cpu.lm_head(cpu_hidden.data() + size_t(last) * h, cpu_logits.data());
  gpu.lm_head(gpu_hidden.get() + size_t(last) * h, gpu_logits.data());
  gpu.synchronize();
  ASSERT_EQ(test::sync_device(), "");
  const double error = relative_error(gpu_logits, cpu_logits);
  RecordProperty("relative_error", std::to_string(error));
  EXPECT_LE(error, 1e-2) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Presets, CudaStage, ::testing::Values("tiny", "tiny-qwen2", "tiny-qwen3", "small"));

// The batched form MLA's absorption uses: per head, a column slice of x and y, and w as
// stored [in, out] (W_UK) or [out, in] (W_UV), against the CPU's GEMM head by head.
TEST(LtGemm, BatchedSlicesMatchCpuLinear) {
  REQUIRE_DEVICE();
  const int rows = 29, heads = 3, in = 16, out = 24, x_ld = heads * in + 8, y_ld = heads * out + 4;
  const auto x = random_bf16_vector(size_t(rows) * x_ld, 3);
  const auto w = random_bf16_vector(size_t(heads) * in * out + 64, 4);
  const int64_t w_stride = int64_t(in) * out + 16;  // heads' slices apart, like kv_b's W_UK between W_UV rows
  test::DeviceMemory<kernels::bf16> d_x(cuda::to_bf16(x)), d_w(cuda::to_bf16(w));
  cuda::LtGemm gemm;
  for (const bool w_in_out : {false, true}) {
    std::vector<float> want(size_t(rows) * y_ld, std::nanf(""));
    for (int head = 0; head < heads; ++head) {
      std::vector<float> x_head(size_t(rows) * in), w_head(size_t(out) * in), y_head(size_t(rows) * out);
      for (int r = 0; r < rows; ++r)
        for (int i = 0; i < in; ++i) x_head[size_t(r) * in + i] = x[size_t(r) * x_ld + head * in + i];
      for (int o = 0; o < out; ++o)  // as [out, in] for cpu::linear
        for (int i = 0; i < in; ++i)
          w_head[size_t(o) * in + i] =
              w[head * w_stride + (w_in_out ? size_t(i) * out + o : size_t(o) * in + i)];
      cpu::linear(x_head.data(), rows, in, w_head.data(), out, y_head.data());
      for (int r = 0; r < rows; ++r)
        for (int o = 0; o < out; ++o) want[size_t(r) * y_ld + head * out + o] = y_head[size_t(r) * out + o];
    }
    test::DeviceMemory<float> d_y(std::vector<float>(want.size(), std::nanf("")));
    cuda::GemmBatch batch;
    batch.count = heads;
    batch.x_ld = x_ld;
    batch.x_stride = in;
    batch.w_stride = w_stride;
    batch.w_in_out = w_in_out;
    batch.y_ld = y_ld;
    batch.y_stride = out;
    gemm.linear_batched(d_x.get(), rows, in, d_w.get(), out, d_y.get(), batch, nullptr);
    ASSERT_EQ(test::sync_device(), "");
    std::vector<float> got = d_y.read();
    for (int r = 0; r < rows; ++r)  // the padding between rows is not written: compare the heads' columns
      for (int c = heads * out; c < y_ld; ++c) got[size_t(r) * y_ld + c] = want[size_t(r) * y_ld + c] = 0;
    EXPECT_LE(relative_error(got, want), 1e-5) << (w_in_out ? "w [in, out]" : "w [out, in]");
  }
}

}  // namespace
