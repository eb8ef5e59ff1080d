// FLOP counts of dense, MoE and MLA layers.
#include "sim/model_shape.hpp"


#include "errors.hpp"

namespace pf::sim {
namespace {

int get_int(const nlohmann::json& j, const char* key, int fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number()) throw UserError(std::string("config field ") + key + " must be a number");
  return j[key].get<int>();
}

}  // namespace

double ModelShape::matmul_flops(int layer, double x) const {
  const double h = hidden_size;
  double attention_proj;
  if (mla()) {
    const double qk = head_dim, v = v_head_dim, heads = num_heads;
    const double q = q_lora_rank > 0 ? h * q_lora_rank + q_lora_rank * heads * qk : h * heads * qk;
    const double kv = h * (kv_lora_rank + qk_rope_head_dim) + kv_lora_rank * heads * (qk - qk_rope_head_dim + v);
    attention_proj = 2.0 * x * (q + kv + heads * v * h);
  } else {
    const double q = static_cast<double>(num_heads) * head_dim, kv = static_cast<double>(num_kv_heads) * head_dim;
    attention_proj = 2.0 * x * h * (2.0 * q + 2.0 * kv);
  }
  double mlp;
  if (moe() && layer >= first_dense_layers) {
    const double routed = 3.0 * h * moe_intermediate_size * experts_per_token;
    const double shared = 3.0 * h * shared_expert_intermediate_size;
    mlp = 2.0 * x * (routed + shared + h * experts);  // + router
  } else {
    mlp = 2.0 * x * 3.0 * h * intermediate_size;
  }
  return attention_proj + mlp;
}

double ModelShape::attention_flops(double prefix, double x) const {
  // Query at position p sees p + 1 keys: sum over the chunk = x L + x (x + 1) / 2.
  const double keys = x * prefix + 0.5 * x * (x + 1.0);
  return 2.0 * num_heads * (head_dim + v_head_dim) * keys;
}

double ModelShape::active_parameters() const {
  double total = 0;
  for (int layer = 0; layer < num_layers; ++layer) total += matmul_flops(layer, 1.0) / 2.0;
  return total + 2.0 * hidden_size * vocab_size;
}

ModelShape shape_from_json(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object()) throw UserError(origin + ": not a JSON object");
  ModelShape s;
  try {
    s.name = j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty()
                 ? j["architectures"][0].get<std::string>()
                 : j.value("model_type", std::string("unknown"));
    s.hidden_size = get_int(j, "hidden_size", 0);
    s.num_layers = get_int(j, "num_hidden_layers", 0);
    s.num_heads = get_int(j, "num_attention_heads", 0);
    s.num_kv_heads = get_int(j, "num_key_value_heads", s.num_heads);
    s.vocab_size = get_int(j, "vocab_size", 0);
    s.max_position_embeddings = get_int(j, "max_position_embeddings", 0);
    s.intermediate_size = get_int(j, "intermediate_size", 0);
    s.kv_lora_rank = get_int(j, "kv_lora_rank", 0);
    if (s.mla()) {
      s.q_lora_rank = get_int(j, "q_lora_rank", 0);
      s.qk_rope_head_dim = get_int(j, "qk_rope_head_dim", 0);
      s.head_dim = get_int(j, "qk_nope_head_dim", 0) + s.qk_rope_head_dim;
      s.v_head_dim = get_int(j, "v_head_dim", s.head_dim);
    } else {
      s.head_dim = get_int(j, "head_dim", s.num_heads > 0 ? s.hidden_size / s.num_heads : 0);
      s.v_head_dim = s.head_dim;
    }
    s.experts = get_int(j, "num_experts", get_int(j, "n_routed_experts", 0));
    if (s.moe()) {
      s.experts_per_token = get_int(j, "num_experts_per_tok", 0);
      s.moe_intermediate_size = get_int(j, "moe_intermediate_size", 0);
      const int shared_experts = get_int(j, "n_shared_experts", 0);
      s.shared_expert_intermediate_size =
          get_int(j, "shared_expert_intermediate_size", shared_experts * s.moe_intermediate_size);
      s.first_dense_layers = get_int(j, "first_k_dense_replace", 0);
    }
    if (j.contains("quantization_config") && j["quantization_config"].is_object())
      s.fp8 = j["quantization_config"].value("quant_method", std::string()) == "fp8";
  } catch (const nlohmann::json::exception& e) {
    throw UserError(origin + ": " + e.what());
  }
  if (s.hidden_size <= 0 || s.num_layers <= 0 || s.num_heads <= 0 || s.vocab_size <= 0 || s.head_dim <= 0)
    throw UserError(origin + ": needs hidden_size, num_hidden_layers, num_attention_heads and vocab_size");
  if (s.moe() && (s.experts_per_token <= 0 || s.moe_intermediate_size <= 0))
    throw UserError(origin + ": an MoE config needs num_experts_per_tok and moe_intermediate_size");
  if (!s.moe() && s.intermediate_size <= 0) throw UserError(origin + ": needs intermediate_size");
  return s;
}

ModelShape load_model_shape(const std::string& path) {
  return shape_from_json(model::read_config_json(path), path);
}

ModelShape shape_from_config(const model::ModelConfig& c) { return shape_from_json(model::to_json(c), c.architecture_name); }

}  // namespace pf::sim
