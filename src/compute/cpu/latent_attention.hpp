// Multi-head latent attention (DeepSeek-V2/V3) on the CPU, computed absorbed: each head's
// q_nope is carried into the latent space through its slice of kv_b (W_UK), attention runs
// like multi-query attention over the cached [latent | k_rope] rows (one row per token for
// every head), and each head's latent output is carried out through its W_UV slice. The
// cache thus never holds per-head keys or values (docs/choices.md has the trade-off).
#pragma once

#include <cstdint>
#include <vector>

#include "compute/cpu/attention.hpp"
#include "kvcache/paged_kv_pool.hpp"
#include "model/config.hpp"
#include "model/weights.hpp"

namespace pf::cpu {

struct LatentWorkspace {
  std::vector<float> q_lora;      // [tokens, q_lora_rank]
  std::vector<float> latent;      // [tokens, kv_lora + rope]: the rows the cache stores
  std::vector<float> q_absorbed;  // [tokens, heads, kv_lora + rope]
  std::vector<float> out_latent;  // [tokens, heads, kv_lora + rope]
  AttentionWorkspace attention;
};

// x [tokens, hidden] (normed) -> q [tokens, heads * (nope + rope)] (this rank's heads) and
// ws.latent (kv_lora normed, then the rope key), before RoPE. `norm_eps`: the two LoRA norms'.
void latent_projections(const float* x, int tokens, const model::ModelConfig& config, int heads,
                        const model::LayerWeights& layer, float* q, LatentWorkspace& ws);

// RoPE on q's rope parts and the latent's rope key, at positions pos0...
void latent_rope(float* q, int tokens, const model::ModelConfig& config, int heads, int pos0,
                 const std::vector<double>& inv_freq, float rope_scale, LatentWorkspace& ws);

// out [tokens, heads * v_head_dim] = attention of the chunk's queries over the prompt's latent
// cache (whose rows for this chunk are written), through kv_b's W_UK and W_UV.
void latent_attention(const float* q, int tokens, int pos0, const kv::KvLayerView& kv,
                      const model::ModelConfig& config, int heads, const model::LayerWeights& layer, float* out,
                      LatentWorkspace& ws);

}  // namespace pf::cpu
