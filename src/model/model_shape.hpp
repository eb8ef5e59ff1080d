// The shape of a model as far as cost is concerned, read from any Hugging Face config.json
// a user might bring for a what-if study: dense Llama/Qwen, Qwen3-MoE / Qwen2-MoE experts,
// DeepSeek-V3 style MoE with multi-head latent attention (MLA). Only FLOP counting and
// message sizes use it; the CPU backend needs the stricter ModelConfig. Fields the two
// readers share are read by the same model::field rules (type and range).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/config.hpp"

namespace pf::model {

struct ModelShape {
  std::string name;
  int hidden_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // q/k head dim for GQA; for MLA: qk_nope + qk_rope
  int v_head_dim = 0;
  int vocab_size = 0;
  bool tie_word_embeddings = false;  // lm_head is the embedding matrix: its parameters count once
  int max_position_embeddings = 0;   // 0: not given
  int intermediate_size = 0;         // dense MLP width
  // Mixture of experts (0 when dense).
  int experts = 0;
  int experts_per_token = 0;
  int moe_intermediate_size = 0;
  int shared_expert_intermediate_size = 0;  // total width of always-on shared experts
  bool shared_expert_gate = false;          // Qwen2-MoE: one more [1, hidden] projection
  std::vector<bool> sparse_layer;           // MoE: which layers have experts (the others: dense MLP)
  // Multi-head latent attention (DeepSeek-V2/V3), 0 when absent.
  int q_lora_rank = 0;
  int kv_lora_rank = 0;
  int qk_rope_head_dim = 0;
  bool fp8 = false;  // quantization_config.quant_method == "fp8": matmuls at the fp8 rate

  bool mla() const { return kv_lora_rank > 0; }
  bool moe() const { return experts > 0; }
  // MLA's cached row: the latent and the rope key (ModelConfig's MlaConfig::latent_width).
  int latent_width() const { return kv_lora_rank + qk_rope_head_dim; }
  bool moe_layer(int layer) const {
    return moe() && (layer >= static_cast<int>(sparse_layer.size()) || sparse_layer[static_cast<size_t>(layer)]);
  }
  // Multiply-add width per (query, key, head) of attention: q.k plus p.v (MLA attends
  // expanded, as SGLang's prefill does: docs/choices.md).
  double attention_width() const { return static_cast<double>(head_dim) + v_head_dim; }
  // MLA: expanding the latents of a chunk's prefix and its own tokens into every head's
  // k_nope and v, once per chunk and layer (the prefix part is the cost model's gamma * L).
  double latent_expansion_flops(double prefix, double tokens) const {
    return mla() ? 2.0 * (prefix + tokens) * kv_lora_rank * num_heads * (head_dim - qk_rope_head_dim + v_head_dim)
                 : 0.0;
  }
  // FLOPs of one layer (all TP ranks together) for a chunk of x tokens after a prefix of L.
  double matmul_flops(int layer, double tokens) const;  // projections, MLP / experts, router (not MLA's expansion)
  // The part of matmul_flops every TP rank computes whole (the router, Qwen2-MoE's shared
  // gate, MLA's q_a and kv_a projections), and one rank's share of the layer's matmuls.
  double replicated_matmul_flops(int layer, double tokens) const;
  double rank_matmul_flops(int layer, double tokens, int tp) const {
    if (tp == 1) return matmul_flops(layer, tokens);  // the whole layer, without a rounding detour
    const double replicated = replicated_matmul_flops(layer, tokens);
    return (matmul_flops(layer, tokens) - replicated) / tp + replicated;
  }
  double attention_flops(double prefix, double tokens) const;              // QK^T and PV, causal
  double lm_head_flops() const { return 2.0 * hidden_size * vocab_size; }  // one position
  // Values the KV cache keeps per token and layer (whole model width): MLA's latent and rope
  // key, shared by every head; else K and V of each KV head. And what full per-head K and V
  // would take (MLA's heads each expand their own).
  double cached_values_per_token() const { return mla() ? latent_width() : 2.0 * num_kv_heads * head_dim; }
  double full_kv_values_per_token() const {
    return mla() ? static_cast<double>(num_heads) * (head_dim + v_head_dim) : cached_values_per_token();
  }
  // Parameters that take part in one token's forward (active parameters), the embedding
  // and lm_head included (once when tied).
  double active_parameters() const;
  // Every weight of one layer's matmuls, all experts included (what its weights occupy),
  // and the part of them every TP rank holds whole (the router, MLA's q_a and kv_a).
  double layer_parameters(int layer) const;
  double replicated_layer_parameters(int layer) const { return replicated_matmul_flops(layer, 1.0) / 2.0; }
};

// FLOPs of layers [first, first + count) on a chunk of `tokens` after `pos0` tokens, whole
// model width: matmuls and attention; norms, RoPE and activations are left out.
double chunk_flops(const ModelShape& shape, int first_layer, int layer_count, int tokens, int64_t pos0);
// One TP rank's share of chunk_flops (the replicated matmuls whole, the rest split).
double rank_chunk_flops(const ModelShape& shape, int first_layer, int layer_count, int tokens, int64_t pos0, int tp);

// Whether two shapes cost the same everywhere (layers, widths, heads, vocabulary, each layer's
// matmul FLOPs): a profile timed on one stands for the other. config.json as written and as a
// run records it normalised differ in keys, not in this.
bool same_costs(const ModelShape& a, const ModelShape& b);

ModelShape shape_from_json(const nlohmann::json& config, const std::string& origin);
ModelShape load_model_shape(const std::string& config_path);  // UserError on a bad file
ModelShape shape_from_config(const ModelConfig& config);

}  // namespace pf::model
