// Multi-head latent attention (DeepSeek-V2/V3) on the CPU. The cache holds one row per token
// for every head: the normed latent (kv_lora_rank) and the roped shared key (qk_rope_head_dim).
// Prefill attends the way SGLang's prefill does, expanded rather than absorbed: key block by
// key block, the latents are expanded through kv_b into each head's k_nope and v (one GEMM per
// block for all local heads), and each head attends with q = [q_nope | q_rope] against
// k = [k_nope | k_rope] with an online softmax. Expanding costs the prefix's latents once per
// chunk (the cost model's gamma * L term) but keeps attention at (nope + rope) + v per head and
// key, where the absorbed form (decode's) pays 2 (kv_lora + rope): 3.6x more on DeepSeek-V3.
// docs/choices.md has the figures.
#pragma once

#include <cstdint>
#include <vector>

#include "compute/cpu/ring_attention.hpp"
#include "kvcache/paged_kv_pool.hpp"
#include "model/config.hpp"
#include "model/weights.hpp"

namespace pf::cpu {

struct LatentWorkspace {
  std::vector<float> q_lora;            // [tokens, q_lora_rank]
  std::vector<float> latent;            // [tokens, kv_lora + rope]: the rows the cache stores
  std::vector<float> expanded;          // [key block, heads * (nope + v)]: k_nope and v of each head
  std::vector<float> rope_keys;         // [key block, rope]
  std::vector<float> scores;            // [tokens, key block]
  std::vector<float> acc;               // [heads, tokens, v]
  std::vector<float> row_max, row_sum;  // [heads, tokens]
};

// x [tokens, hidden] (normed) -> q [tokens, heads * (nope + rope)] (this rank's heads) and
// ws.latent (kv_lora normed, then the rope key), before RoPE.
void latent_projections(const float* x, int tokens, const model::ModelConfig& config, int heads,
                        const model::LayerWeights& layer, float* q, LatentWorkspace& ws);

// RoPE on q's rope parts and the rope keys of `latent` (the same tokens' rows of ws.latent), at
// positions pos0.., cos/sin times `rope_scale`.
void latent_rope(float* q, int tokens, const model::ModelConfig& config, int heads, int pos0,
                 const std::vector<double>& inv_freq, float rope_scale, float* latent);

// out [tokens, heads * v_head_dim] = causal attention of the chunk's queries over the prompt's
// latent cache (whose rows for this chunk are written), expanded through the layer's kv_b.
void latent_attention(const float* q, int tokens, int pos0, const kv::KvLayerView& kv, const model::ModelConfig& config,
                      int heads, const model::LayerWeights& layer, float* out, LatentWorkspace& ws);

// Context parallelism: queries q [m] (row stride q_stride), row i seeing the first visible[i]
// (non-decreasing) of `n` packed latent rows [n, kv_lora + rope] of one rank, expanded here
// block by block as latent_attention expands them: out [m, heads * v_head_dim] (row stride
// out_stride) normalized by each row's softmax sum, lse [m, heads] its log (ring_attention.hpp).
void latent_partial_attention(const float* q, int64_t q_stride, int m, const int32_t* visible, const float* latent,
                              int n, const model::ModelConfig& config, int heads, const model::LayerWeights& layer,
                              float* out, int64_t out_stride, float* lse, LatentWorkspace& ws);

// The CP ring's keys for MLA: each rank's latent rows (one per token, kv_lora + rope floats)
// go round, and each rank expands those it attends. pass-KV thus expands the whole prefix on
// every rank, pass-Q only the rank's own rows (cp_attention_for_chunk weighs bytes only).
class LatentRingKeys final : public RingKeys {
 public:
  LatentRingKeys(const kv::KvLayerView& kv, const model::ModelConfig& config, int heads,
                 const model::LayerWeights& layer, LatentWorkspace& ws);
  sched::CpWidths widths() const override;
  void pack(int64_t rows, std::vector<float>& shard) const override;
  void attend(const float* q, int64_t q_stride, int m, const int32_t* visible, const float* shard, int n, float* out,
              int64_t out_stride, float* lse) override;

 private:
  kv::KvLayerView kv_;
  const model::ModelConfig& config_;
  int heads_;
  const model::LayerWeights& layer_;
  LatentWorkspace& ws_;
};

// FLOPs of latent_attention: expanding pos0 + tokens latents, and causal attention at
// (nope + rope) + v per head and key (what model::ModelShape counts).
double latent_attention_flops(const model::ModelConfig& config, int heads, int tokens, int pos0);

}  // namespace pf::cpu
