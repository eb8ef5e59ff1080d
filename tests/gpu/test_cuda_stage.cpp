// The CUDA backend's pieces that only a GPU can run (cuBLASLt, the whole stage), against
// the CPU backend on the same bf16 weights: GEMMs (plain and batched over head slices), and
// a prompt prefilled in three chunks through every layer of tiny / Qwen2 / Qwen3 / small
// presets and of small Qwen3-MoE, Qwen2-MoE, Mixtral and DeepSeek-V3 (MLA) configs. Skips
// itself without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "compute/cpu/gemm.hpp"
#include "compute/cuda/cuda_stage_compute.hpp"
#include "compute/cuda/lt_gemm.hpp"
#include "compute/cpu/cpu_stage_compute.hpp"
#include "device_memory.hpp"
#include "support/test_data.hpp"
#include "io/safetensors.hpp"
#include "model/model_source.hpp"
#include "model/tensor_source.hpp"
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

// Both backends on the same (bf16) weights: the comparison measures activations only. The
// router, its correction bias and the shared expert's gate stay float32 on the GPU too.
void round_to_bf16(model::StageWeights& weights) {
  round_all(weights.embedding);
  round_all(weights.final_norm);
  round_all(weights.lm_head);
  for (auto& l : weights.layers) {
    for (auto* t : {&l.input_norm, &l.qkv, &l.qkv_bias, &l.q_norm, &l.k_norm, &l.o, &l.post_norm, &l.gate_up, &l.down,
                    &l.q_a, &l.q_a_norm, &l.q_b, &l.kv_a, &l.kv_a_norm, &l.kv_b, &l.shared.gate_up, &l.shared.down})
      round_all(*t);
    for (auto& expert : l.experts) {
      round_all(expert.gate_up);
      round_all(expert.down);
    }
  }
}

// A prompt of 150 tokens prefilled in three chunks (the last two after a prefix) on both
// backends; the last token's logits compared. The cpu backend computes every row; the GPU
// too, then again told that only that row is read (compute::OutputRows: its last layer
// skips the others).
void expect_prefill_matches_cpu(const model::ModelConfig& c, const model::TensorSource& tensors,
                                const std::string& name, double bound = 1e-2) {
  const model::ShardSpec shard = model::make_shard_spec(c, 1, 0);
  model::StageWeights weights = model::load_stage_weights(c, tensors, {0, c.num_layers}, true, true, shard);
  round_to_bf16(weights);

  const int page = 64, length = 150, h = c.hidden_size;
  const int chunks[][2] = {{0, 64}, {64, 128}, {128, length}};
  std::vector<int32_t> tokens(length);
  for (int i = 0; i < length; ++i) tokens[i] = (i * 37 + 11) % c.vocab_size;

  for (const bool rows_read_only : {false, true}) {
    cuda::CudaStageCompute gpu(c, shard, cuda::DeviceWeights::upload(weights), page, 64);
    gpu.allocate_kv(4);
    kv::KvShape kv_shape = gpu.kv_shape();  // the same layout (MLA: one latent row a token), in float
    kv_shape.element_bytes = sizeof(float);
    kv::PagedKvPool pool(kv_shape, 4);
    compute::CpuStageCompute cpu(c, shard, weights, pool);

    std::vector<float> cpu_hidden, cpu_logits(shard.vocab_count), gpu_logits(shard.vocab_count);
    test::DeviceMemory<float> gpu_hidden(size_t(64) * h);
    for (const auto& chunk : chunks) {
      const int t = chunk[1] - chunk[0];
      cpu_hidden.assign(size_t(t) * h, 0);
      cpu.embed(tokens.data() + chunk[0], t, cpu_hidden.data());
      cpu.forward({0, chunk[0], t}, cpu_hidden.data());
      gpu.embed(tokens.data() + chunk[0], t, gpu_hidden.get());
      gpu.forward({0, chunk[0], t, -1, rows_read_only ? (chunk[1] == length ? t - 1 : t) : 0}, gpu_hidden.get());
    }
    const int last = chunks[2][1] - chunks[2][0] - 1;
    cpu.lm_head(cpu_hidden.data() + size_t(last) * h, cpu_logits.data());
    gpu.lm_head(gpu_hidden.get() + size_t(last) * h, gpu_logits.data());
    gpu.synchronize();
    ASSERT_EQ(test::sync_device(), "");
    const double error = relative_error(gpu_logits, cpu_logits);
    ::testing::Test::RecordProperty("relative_error", std::to_string(error));
    EXPECT_LE(error, bound) << name << (rows_read_only ? ", the last row alone through the last layer" : "");
  }
}

class CudaStage : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaStage, PrefillInChunksMatchesCpuBackend) {
  REQUIRE_DEVICE();
  const model::ModelSource source = model::open_model(std::string("synthetic:") + GetParam(), 5);
  expect_prefill_matches_cpu(source.config, *source.tensors, GetParam());
}

#ifdef PF_RUNTIME_SIM  // the host simulator runs a thread per CUDA thread: "small" would take hours there
INSTANTIATE_TEST_SUITE_P(Presets, CudaStage, ::testing::Values("tiny", "tiny-qwen2", "tiny-qwen3"));
#else
INSTANTIATE_TEST_SUITE_P(Presets, CudaStage, ::testing::Values("tiny", "tiny-qwen2", "tiny-qwen3", "small"));
#endif

// Mixture-of-experts and latent-attention families, as config.json files of small shapes
// (head_dim 32 where the attention is grouped-query: the dense attention kernel's sizes).
nlohmann::json family_config(const std::string& family) {
  nlohmann::json j = {{"hidden_size", 128},         {"num_hidden_layers", 3}, {"num_attention_heads", 4},
                      {"num_key_value_heads", 2},   {"vocab_size", 97},       {"intermediate_size", 96},
                      {"num_experts_per_tok", 2},   {"hidden_act", "silu"},   {"max_position_embeddings", 4096}};
  if (family == "qwen3_moe")  // qk norm, renormalised softmax top-k, one dense layer
    j.update({{"architectures", {"Qwen3MoeForCausalLM"}}, {"num_experts", 8}, {"moe_intermediate_size", 32},
              {"norm_topk_prob", true}, {"head_dim", 32}, {"mlp_only_layers", {1}}, {"decoder_sparse_step", 1}});
  else if (family == "qwen2_moe")  // q/k/v biases, a sigmoid-gated shared expert on every second layer
    j.update({{"architectures", {"Qwen2MoeForCausalLM"}}, {"num_experts", 8}, {"moe_intermediate_size", 32},
              {"shared_expert_intermediate_size", 48}, {"decoder_sparse_step", 2}, {"qkv_bias", true}});
  else if (family == "mixtral")  // every layer MoE, experts as wide as the dense MLP
    j.update({{"architectures", {"MixtralForCausalLM"}}, {"num_local_experts", 8}, {"intermediate_size", 32},
              {"sliding_window", nullptr}});
  else  // deepseek_v3: MLA (YaRN), sigmoid group-limited routing with bias and scaling, shared expert
    j.update({{"architectures", {"DeepseekV3ForCausalLM"}}, {"hidden_size", 64}, {"num_key_value_heads", 4},
              {"n_routed_experts", 8}, {"moe_intermediate_size", 32}, {"n_shared_experts", 1},
              {"first_k_dense_replace", 1}, {"n_group", 4}, {"topk_group", 2}, {"routed_scaling_factor", 2.5},
              {"q_lora_rank", 32}, {"kv_lora_rank", 16}, {"qk_nope_head_dim", 16}, {"qk_rope_head_dim", 8},
              {"v_head_dim", 16},
              {"rope_scaling", {{"type", "yarn"}, {"factor", 40.0}, {"original_max_position_embeddings", 4096},
                                {"beta_fast", 32}, {"beta_slow", 1}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}}}});
  return j;
}

class CudaStageFamily : public ::testing::TestWithParam<const char*> {};

// Routed families twice. With every expert chosen (no discrete choice) the GPU's bf16
// activations must give the CPU's logits within the dense models' bound. With the top-k as
// configured, a token whose scores are near a tie can pick other experts in bf16 than in
// float32, which moves its hidden state by a whole expert's output: measured on the host
// simulator, 1.3e-2 (Qwen3-MoE) and 5.0e-2 (DeepSeek-V3) against 2.8e-3 and 5.5e-3 with
// every expert chosen. So the top-k run's bound is 1e-1: it still catches a wrong expert,
// weight or gate (errors of order 1), and the router's own choice is checked kernel by
// kernel against the CPU's (test_moe_kernels_vs_cpu.cpp).
TEST_P(CudaStageFamily, PrefillInChunksMatchesCpuBackend) {
  REQUIRE_DEVICE();
  nlohmann::json j = family_config(GetParam());
  const model::ModelConfig c = model::parse_config(j, GetParam());
  expect_prefill_matches_cpu(c, *model::make_synthetic_source(c, 5), GetParam(), 1e-1);
  const int experts = c.moe.experts;
  j["num_experts_per_tok"] = experts;
  if (j.contains("topk_group")) j["topk_group"] = j["n_group"];
  const model::ModelConfig every = model::parse_config(j, GetParam());
  expect_prefill_matches_cpu(every, *model::make_synthetic_source(every, 5), std::string(GetParam()) + ", every expert");
}

INSTANTIATE_TEST_SUITE_P(MoeAndMla, CudaStageFamily,
                         ::testing::Values("qwen3_moe", "qwen2_moe", "mixtral", "deepseek_v3"));

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

// The benchmark's weights (DeviceWeights::random, bench/): every tensor of a dense stage in the
// shapes its shard needs, the projections uniform within sqrt(3 / fan_in) and the norms' gains
// within 0.1 of 1, and a chunk through them stays finite; MoE and MLA models are refused.
TEST(DeviceWeights, RandomFillsEveryTensorOfADenseStage) {
  REQUIRE_DEVICE();
  for (const char* preset : {"tiny-qwen2", "tiny-qwen3"}) {
    SCOPED_TRACE(preset);
    const model::ModelConfig config = model::open_model(std::string("synthetic:") + preset, 5).config;
    const model::ShardSpec shard = model::make_shard_spec(config, 1, 0);
    const cuda::DeviceWeights w = cuda::DeviceWeights::random(config, shard, config.num_layers, true, true, 3);
    const size_t h = config.hidden_size, d = config.head_dim, qkv = (shard.heads + 2 * shard.kv_heads) * d;
    size_t layer = qkv * h + h * shard.heads * d + 3 * h * shard.intermediate + 2 * h;
    if (config.attention_bias) layer += qkv;
    if (config.qk_norm) layer += 2 * d;
    const size_t values = 2 * size_t(config.vocab_size) * h + h + config.num_layers * layer;
    EXPECT_EQ(w.bytes(), 2 * values);
    const auto widened = [](const cuda::DeviceArray<kernels::bf16>& a) {
      std::vector<uint16_t> bits(a.size());
      EXPECT_EQ(cudaMemcpy(bits.data(), a.data(), 2 * bits.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      std::vector<float> v;
      for (uint16_t b : bits) v.push_back(io::bf16_to_float(b));
      return v;
    };
    for (float x : widened(w.layers[0].qkv)) ASSERT_LE(std::abs(x), std::sqrt(3.0f / h) * 1.01f);
    for (float x : widened(w.final_norm)) ASSERT_NEAR(x, 1.0f, 0.101f);
    cuda::CudaStageCompute gpu(config, shard, cuda::DeviceWeights::random(config, shard, config.num_layers, true, true, 3),
                               64, 64);
    gpu.allocate_kv(gpu.kv_shape().pages_for(64));
    const std::vector<int32_t> tokens = {1, 7, 3, 9, 4, 2, 8, 5};
    test::DeviceMemory<float> hidden(std::vector<float>(tokens.size() * h, 0.0f));
    gpu.prepare_prefix(0, 0, static_cast<int>(tokens.size()));
    gpu.embed(tokens.data(), static_cast<int>(tokens.size()), hidden.get());
    gpu.forward({0, 0, static_cast<int>(tokens.size())}, hidden.get());
    gpu.synchronize();
    for (float x : hidden.read()) ASSERT_TRUE(std::isfinite(x));
  }
  const model::ModelConfig moe = model::open_model("synthetic:tiny-moe", 5).config;
  EXPECT_THROW(cuda::DeviceWeights::random(moe, model::make_shard_spec(moe, 1, 0), 1, true, true, 3),
               std::invalid_argument);
}

}  // namespace
