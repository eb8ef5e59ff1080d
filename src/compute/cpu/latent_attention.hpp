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

// RoPE on q's rope parts and the latent's rope key, at positions pos0.., cos/sin times `rope_scale`.
void latent_rope(float* q, int tokens, const model::ModelConfig& config, int heads, int pos0,
                 const std::vector<double>& inv_freq, float rope_scale, LatentWorkspace& ws);

// out [tokens, heads * v_head_dim] = causal attention of the chunk's queries over the prompt's
// latent cache (whose rows for this chunk are written), expanded through the layer's kv_b.
void latent_attention(const float* q, int tokens, int pos0, const kv::KvLayerView& kv, const model::ModelConfig& config,
                      int heads, const model::LayerWeights& layer, float* out, LatentWorkspace& ws);

// FLOPs of latent_attention: expanding pos0 + tokens latents, and causal attention at
// (nope + rope) + v per head and key (what model::ModelShape counts).
double latent_attention_flops(const model::ModelConfig& config, int heads, int tokens, int pos0);

}  // namespace pf::cpu
