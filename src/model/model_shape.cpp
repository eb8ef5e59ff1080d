// FLOP counts of dense, MoE and MLA layers, and the permissive config.json reader behind them.
#include "model/model_shape.hpp"

#include "errors.hpp"

namespace pf::model {
namespace {}  // namespace

double chunk_flops(const ModelShape& shape, int first_layer, int layer_count, int tokens, int64_t pos0) {
  return rank_chunk_flops(shape, first_layer, layer_count, tokens, pos0, 1);
}

double rank_chunk_flops(const ModelShape& shape, int first_layer, int layer_count, int tokens, int64_t pos0, int tp) {
  double total = 0;
  for (int layer = first_layer; layer < first_layer + layer_count; ++layer)
    total +=
        shape.rank_matmul_flops(layer, tokens, tp) + (shape.attention_flops(static_cast<double>(pos0), tokens) +
                                                      shape.latent_expansion_flops(static_cast<double>(pos0), tokens)) /
                                                         tp;
  return total;
}

double ModelShape::replicated_matmul_flops(int layer, double x) const {
  const double h = hidden_size;
  double replicated = 0;
  if (mla()) replicated += h * (q_lora_rank + kv_lora_rank + qk_rope_head_dim);
  if (moe_layer(layer)) replicated += h * experts + (shared_expert_gate ? h : 0.0);
  return 2.0 * x * replicated;
}

double ModelShape::matmul_flops(int layer, double x) const {
  const double h = hidden_size;
  double attention_proj;
  if (mla()) {
    const double qk = head_dim, v = v_head_dim, heads = num_heads;
    const double q = q_lora_rank > 0 ? h * q_lora_rank + q_lora_rank * heads * qk : h * heads * qk;
    const double kv = h * (kv_lora_rank + qk_rope_head_dim);  // kv_b's expansion: latent_expansion_flops
    attention_proj = 2.0 * x * (q + kv + heads * v * h);
  } else {
    const double q = static_cast<double>(num_heads) * head_dim, kv = static_cast<double>(num_kv_heads) * head_dim;
    attention_proj = 2.0 * x * h * (2.0 * q + 2.0 * kv);
  }
  double mlp;
  if (moe_layer(layer)) {
    const double routed = 3.0 * h * moe_intermediate_size * experts_per_token;
    const double shared = 3.0 * h * shared_expert_intermediate_size + (shared_expert_gate ? h : 0.0);
    mlp = 2.0 * x * (routed + shared + h * experts);  // + router
  } else {
    mlp = 2.0 * x * 3.0 * h * intermediate_size;
  }
  return attention_proj + mlp;
}

double ModelShape::attention_flops(double prefix, double x) const {
  // Query at position p sees p + 1 keys: sum over the chunk = x L + x (x + 1) / 2.
  const double keys = x * prefix + 0.5 * x * (x + 1.0);
  return 2.0 * num_heads * attention_width() * keys;
}

bool same_costs(const ModelShape& a, const ModelShape& b) {
  if (a.num_layers != b.num_layers || a.hidden_size != b.hidden_size || a.vocab_size != b.vocab_size ||
      a.num_heads != b.num_heads || a.num_kv_heads != b.num_kv_heads || a.attention_width() != b.attention_width() ||
      a.kv_lora_rank != b.kv_lora_rank)
    return false;
  for (int layer = 0; layer < a.num_layers; ++layer)
    if (a.matmul_flops(layer, 1.0) != b.matmul_flops(layer, 1.0)) return false;
  return true;
}

double ModelShape::active_parameters() const {
  double total = 0;
  for (int layer = 0; layer < num_layers; ++layer)
    total += (matmul_flops(layer, 1.0) + latent_expansion_flops(0.0, 1.0)) / 2.0;  // kv_b once per token
  const double embedding = static_cast<double>(hidden_size) * vocab_size;
  return total + embedding * (tie_word_embeddings ? 1.0 : 2.0);
}

double ModelShape::layer_parameters(int layer) const {
  // One token's matmul FLOPs count every weight once (twice: multiply and add), except that
  // a routed layer's token meets experts_per_token of its experts and MLA's kv_b is counted
  // in the expansion.
  double parameters = matmul_flops(layer, 1.0) / 2.0 + latent_expansion_flops(0.0, 1.0) / 2.0;
  if (moe_layer(layer))
    parameters += 3.0 * hidden_size * static_cast<double>(moe_intermediate_size) * (experts - experts_per_token);
  return parameters;
}

ModelShape shape_from_json(const nlohmann::json& j, const std::string& origin) {
  using namespace model::field;
  if (!j.is_object()) throw UserError(origin + ": not a JSON object");
  const Reader config(j, origin);
  ModelShape s;
  refuse_architectures_string(j, origin);
  try {
    s.name = j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty()
                 ? j["architectures"][0].get<std::string>()
                 : j.value("model_type", std::string("unknown"));
    if (j.contains("quantization_config") && j["quantization_config"].is_object())
      s.fp8 = j["quantization_config"].value("quant_method", std::string()) == "fp8";
  } catch (const nlohmann::json::exception& e) {
    throw UserError(origin + ": " + e.what());
  }
  s.hidden_size = config.integer(kHiddenSize);
  s.num_layers = config.integer(kNumLayers);
  s.num_heads = config.integer(kNumHeads);
  s.num_kv_heads = config.integer_or(kNumKvHeads, s.num_heads);
  s.vocab_size = config.integer(kVocabSize);
  s.tie_word_embeddings = config.boolean_or("tie_word_embeddings", false);
  s.max_position_embeddings = config.integer_or(kMaxPositions, 0);
  s.intermediate_size = config.integer_or(kIntermediateSize, 0);
  // FLOPs do not depend on RoPE, so any rope type is accepted (DeepSeek's yarn), but its
  // values are held to the same rules as a run's.
  (void)read_rope(config, RopeTypes::kAny);
  s.kv_lora_rank = config.integer_or(kKvLoraRank, 0);
  if (s.mla()) {
    s.q_lora_rank = config.integer_or(kQLoraRank, 0);
    s.qk_rope_head_dim = config.integer_or(kQkRopeHeadDim, 0);
    s.head_dim = config.integer_or(kQkNopeHeadDim, 0) + s.qk_rope_head_dim;
    s.v_head_dim = config.integer_or(kVHeadDim, s.head_dim);
    if (s.head_dim <= 0) throw UserError(origin + ": an MLA config needs qk_nope_head_dim or qk_rope_head_dim");
  } else {
    s.head_dim = read_head_dim(config, s.hidden_size, s.num_heads);
    s.v_head_dim = s.head_dim;
    // Costs of a model no engine can build are not a prediction (`run` refuses it too).
    if (s.num_heads % s.num_kv_heads != 0)
      config.fail(kNumKvHeads.key, "must divide num_attention_heads (" + std::to_string(s.num_heads) + ")",
                  s.num_kv_heads);
  }
  s.experts = config.integer_or(kNumExperts, config.integer_or(kLocalExperts, config.integer_or(kRoutedExperts, 0)));
  const bool moe_family = s.name == "MixtralForCausalLM" || s.name == "Qwen2MoeForCausalLM" ||
                          s.name == "Qwen3MoeForCausalLM" || s.name == "DeepseekV3ForCausalLM";
  if (moe_family && !s.moe())
    throw UserError(origin + ": " + s.name +
                    " is a mixture of experts: it needs at least one routed expert (num_experts, num_local_experts "
                    "or n_routed_experts)");
  if (s.moe()) {
    s.experts_per_token = config.integer(kExpertsPerToken);
    if (s.experts_per_token > s.experts)
      config.fail(kExpertsPerToken.key, "must be at most the " + std::to_string(s.experts) + " routed experts",
                  s.experts_per_token);
    // Mixtral's experts are intermediate_size wide; the others name their width.
    s.moe_intermediate_size =
        config.has(kMoeIntermediateSize.key) ? config.integer(kMoeIntermediateSize) : config.integer(kIntermediateSize);
    const int shared_experts = config.integer_or(kSharedExperts, 0);
    // shared experts * width: both capped, so the product fits (2^16 * 2^24 < 2^63) before the check.
    const long long shared_width = static_cast<long long>(shared_experts) * s.moe_intermediate_size;
    if (!config.has(kSharedExpertSize.key) && shared_width > kMaxWidth)
      config.fail(kSharedExperts.key, "times moe_intermediate_size must be at most " + std::to_string(kMaxWidth),
                  shared_experts);
    s.shared_expert_intermediate_size = config.integer_or(kSharedExpertSize, static_cast<int>(shared_width));
    s.shared_expert_gate = s.name == "Qwen2MoeForCausalLM" && s.shared_expert_intermediate_size > 0;
    s.sparse_layer = read_sparse_layers(config, s.name, s.num_layers);
  }
  if (!s.moe() && s.intermediate_size <= 0) throw UserError(origin + ": missing field \"intermediate_size\"");
  return s;
}

ModelShape load_model_shape(const std::string& path) {
  return shape_from_json(model::read_config_json(path), path);
}

ModelShape shape_from_config(const ModelConfig& c) {
  return shape_from_json(model::to_json(c), c.architecture_name);
}

}  // namespace pf::model
