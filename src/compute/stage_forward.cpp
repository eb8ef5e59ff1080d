// Decoder layer on the CPU (Megatron-style TP): column-parallel q/k/v and gate/up,
// row-parallel o and down, each followed by an all-reduce of the partial sums.
#include "compute/stage_forward.hpp"

#include <cblas.h>

#include <algorithm>
#include <random>

#include "compute/cpu/elementwise.hpp"
#include "compute/cpu/gemm.hpp"

namespace pf::compute {

CpuStageCompute::CpuStageCompute(const model::ModelConfig& config, const model::ShardSpec& shard,
                                 model::StageWeights weights, kv::PagedKvPool& kv_pool)
    : config_(config),
      shard_(shard),
      weights_(std::move(weights)),
      kv_pool_(kv_pool),
      inv_freq_(cpu::rope_inv_freq(config)) {}

void CpuStageCompute::embed(const int32_t* tokens, int count, float* hidden) {
  cpu::embed(weights_.embedding.data(), config_.hidden_size, tokens, count, hidden);
}

void CpuStageCompute::forward(const ChunkContext& chunk, float* hidden, const AllReduce& all_reduce) {
  const int64_t h = config_.hidden_size, d = config_.head_dim, t = chunk.tokens;
  const int64_t qkv_width = static_cast<int64_t>(shard_.heads + 2 * shard_.kv_heads) * d;
  normed_.resize(t * h);
  qkv_.resize(t * qkv_width);
  attn_.resize(t * shard_.heads * d);
  proj_.resize(t * h);
  gate_up_.resize(t * 2 * shard_.intermediate);
  act_.resize(t * shard_.intermediate);
  kv_pool_.reserve(chunk.prompt, chunk.pos0 + chunk.tokens);
  for (int layer = 0; layer < static_cast<int>(weights_.layers.size()); ++layer)
    layer_forward(layer, chunk, hidden, all_reduce);
}

void CpuStageCompute::layer_forward(int layer, const ChunkContext& chunk, float* hidden, const AllReduce& all_reduce) {
  const model::LayerWeights& w = weights_.layers[layer];
  const int h = config_.hidden_size, d = config_.head_dim, t = chunk.tokens;
  const int heads = shard_.heads, kv_heads = shard_.kv_heads, inter = shard_.intermediate;
  const int q_width = heads * d, kv_width = kv_heads * d, qkv_width = q_width + 2 * kv_width;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const int pos0 = static_cast<int>(chunk.pos0);

  // Attention block.
  cpu::rms_norm(hidden, t, h, h, w.input_norm.data(), eps, normed_.data(), h);
  cpu::linear(normed_.data(), t, h, w.qkv.data(), qkv_width, qkv_.data(),
              w.qkv_bias.empty() ? nullptr : w.qkv_bias.data());
  float* q = qkv_.data();
  float* k = q + q_width;
  float* v = k + kv_width;
  if (config_.qk_norm)
    for (int row = 0; row < t; ++row) {
      float* q_row = q + static_cast<int64_t>(row) * qkv_width;
      float* k_row = k + static_cast<int64_t>(row) * qkv_width;
      cpu::rms_norm(q_row, heads, d, d, w.q_norm.data(), eps, q_row, d);
      cpu::rms_norm(k_row, kv_heads, d, d, w.k_norm.data(), eps, k_row, d);
    }
  cpu::apply_rope(q, t, qkv_width, heads, d, pos0, inv_freq_);
  cpu::apply_rope(k, t, qkv_width, kv_heads, d, pos0, inv_freq_);
  kv_pool_.write(layer, chunk.prompt, pos0, t, k, qkv_width, v, qkv_width);
  const kv::KvLayerView view{&kv_pool_, layer, &kv_pool_.pages(chunk.prompt)};
  cpu::chunk_attention(q, qkv_width, t, pos0, view, heads, attn_.data(), q_width, attention_ws_);
  cpu::linear(attn_.data(), t, q_width, w.o.data(), h, proj_.data());
  if (shard_.tp > 1) all_reduce(proj_.data(), t * h);  // row parallel: partial sums
  cpu::add_inplace(hidden, proj_.data(), static_cast<int64_t>(t) * h);

  // MLP block.
  cpu::rms_norm(hidden, t, h, h, w.post_norm.data(), eps, normed_.data(), h);
  cpu::linear(normed_.data(), t, h, w.gate_up.data(), 2 * inter, gate_up_.data());
  cpu::swiglu(gate_up_.data(), t, inter, act_.data());
  cpu::linear(act_.data(), t, inter, w.down.data(), h, proj_.data());
  if (shard_.tp > 1) all_reduce(proj_.data(), t * h);
  cpu::add_inplace(hidden, proj_.data(), static_cast<int64_t>(t) * h);
}

void CpuStageCompute::lm_head(const float* hidden_row, float* logits_shard) {
  const int h = config_.hidden_size;
  std::vector<float> normed(h);
  cpu::rms_norm(hidden_row, 1, h, h, weights_.final_norm.data(), static_cast<float>(config_.rms_norm_eps),
                normed.data(), h);
  cblas_sgemv(CblasRowMajor, CblasNoTrans, shard_.vocab_count, h, 1.0f, weights_.lm_head.data(), h, normed.data(), 1,
              0.0f, logits_shard, 1);
}

void CpuStageCompute::prepare_prefix(int prompt, int64_t prefix, int tokens) {
  kv_pool_.reserve(prompt, prefix + tokens);
  const kv::KvShape& shape = kv_pool_.shape();
  const int kv_width = shape.kv_heads * shape.head_dim;
  constexpr int kBlock = 4096;
  std::mt19937 rng(static_cast<uint32_t>(prefix));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values;
  for (int64_t start = 0; start < prefix; start += kBlock) {
    const int count = static_cast<int>(std::min<int64_t>(kBlock, prefix - start));
    values.resize(static_cast<size_t>(count) * kv_width);
    for (auto& v : values) v = uniform(rng);
    for (int layer = 0; layer < shape.layers; ++layer)
      kv_pool_.write(layer, prompt, static_cast<int>(start), count, values.data(), kv_width, values.data(), kv_width);
  }
}


}  // namespace pf::compute
