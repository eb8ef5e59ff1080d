// config.json <-> ModelConfig. Field names follow Hugging Face transformers.
#include "model/config.hpp"

#include <fstream>

#include "errors.hpp"

namespace pf::model {
namespace {

template <typename T>
T required(const nlohmann::json& json, const char* key, const std::string& origin) {
  if (!json.contains(key) || json[key].is_null()) throw UserError(origin + ": missing field \"" + key + "\"");
  try {
    return json[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    throw UserError(origin + ": field \"" + key + "\" has the wrong type");
  }
}

template <typename T>
T optional(const nlohmann::json& json, const char* key, T fallback) {
  if (!json.contains(key) || json[key].is_null()) return fallback;
  return json[key].get<T>();
}

}  // namespace

long long ModelConfig::layer_parameters() const {
  const long long h = hidden_size;
  long long attention = h * q_dim() + 2 * h * kv_dim() + static_cast<long long>(q_dim()) * h;
  if (attention_bias) attention += q_dim() + 2 * kv_dim();
  if (qk_norm) attention += 2 * head_dim;
  return attention + 3 * h * intermediate_size + 2 * h;
}

long long ModelConfig::total_parameters() const {
  const long long embedding = static_cast<long long>(vocab_size) * hidden_size;
  return num_layers * layer_parameters() + embedding * (tie_word_embeddings ? 1 : 2) + hidden_size;
}

ModelConfig parse_config(const nlohmann::json& json, const std::string& origin) {
  if (!json.is_object()) throw UserError(origin + ": not a JSON object");
  ModelConfig c;
  auto architectures = json.value("architectures", nlohmann::json::array());
  if (!architectures.is_array() || architectures.empty() || !architectures[0].is_string())
    throw UserError(origin + ": missing \"architectures\" (e.g. [\"LlamaForCausalLM\"])");
  c.architecture_name = architectures[0].get<std::string>();
  if (c.architecture_name == "LlamaForCausalLM") {
    c.architecture = Architecture::kLlama;
  } else if (c.architecture_name == "Qwen2ForCausalLM") {
    c.architecture = Architecture::kQwen2;
  } else if (c.architecture_name == "Qwen3ForCausalLM") {
    c.architecture = Architecture::kQwen3;
  } else {
    throw UserError(origin + ": unknown architecture \"" + c.architecture_name +
                    "\" (supported: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)");
  }
  c.hidden_size = required<int>(json, "hidden_size", origin);
  c.intermediate_size = required<int>(json, "intermediate_size", origin);
  c.num_layers = required<int>(json, "num_hidden_layers", origin);
  c.num_heads = required<int>(json, "num_attention_heads", origin);
  c.num_kv_heads = optional<int>(json, "num_key_value_heads", c.num_heads);
  c.vocab_size = required<int>(json, "vocab_size", origin);
  if (c.num_heads <= 0 || c.hidden_size <= 0) throw UserError(origin + ": sizes must be positive");
  c.head_dim = optional<int>(json, "head_dim", c.hidden_size / c.num_heads);
  c.max_position_embeddings = optional<int>(json, "max_position_embeddings", 1 << 30);
  c.rms_norm_eps = optional<double>(json, "rms_norm_eps", 1e-6);
  c.rope_theta = optional<double>(json, "rope_theta", 10000.0);
  c.tie_word_embeddings = optional<bool>(json, "tie_word_embeddings", false);
  c.attention_bias = optional<bool>(json, "attention_bias", c.architecture == Architecture::kQwen2);
  c.qk_norm = c.architecture == Architecture::kQwen3;

  if (json.contains("rope_scaling") && json["rope_scaling"].is_object()) {
    const auto& rs = json["rope_scaling"];
    std::string type = rs.value("rope_type", rs.value("type", std::string("default")));
    if (type == "llama3") {
      c.rope_scaling.llama3 = true;
      c.rope_scaling.factor = required<double>(rs, "factor", origin + " rope_scaling");
      c.rope_scaling.low_freq_factor = required<double>(rs, "low_freq_factor", origin + " rope_scaling");
      c.rope_scaling.high_freq_factor = required<double>(rs, "high_freq_factor", origin + " rope_scaling");
      c.rope_scaling.original_max_position_embeddings =
          required<double>(rs, "original_max_position_embeddings", origin + " rope_scaling");
    } else if (type != "default") {
      throw UserError(origin + ": rope_scaling type \"" + type + "\" is not supported (supported: llama3)");
    }
  }

  for (auto [value, name] : {std::pair{c.intermediate_size, "intermediate_size"},
                             {c.num_layers, "num_hidden_layers"},
                             {c.num_kv_heads, "num_key_value_heads"},
                             {c.vocab_size, "vocab_size"},
                             {c.head_dim, "head_dim"}})
    if (value <= 0) throw UserError(origin + ": " + name + " must be positive");
  if (c.num_heads % c.num_kv_heads != 0)
    throw UserError(origin + ": num_attention_heads must be a multiple of num_key_value_heads");
  if (c.head_dim % 2 != 0) throw UserError(origin + ": head_dim must be even for RoPE");
  return c;
}

nlohmann::json read_config_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UserError("cannot read model config " + path);
  nlohmann::json json;
  try {
    in >> json;
  } catch (const nlohmann::json::exception& e) {
    throw UserError(path + ": malformed JSON (" + std::string(e.what()) + ")");
  }
  return json;
}

ModelConfig load_config_file(const std::string& path) { return parse_config(read_config_json(path), path); }

nlohmann::json to_json(const ModelConfig& c) {
  nlohmann::json json = {
      {"architectures", {c.architecture_name}},
      {"model_type", c.architecture == Architecture::kLlama   ? "llama"
                     : c.architecture == Architecture::kQwen2 ? "qwen2"
                                                              : "qwen3"},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_layers},
      {"num_attention_heads", c.num_heads},
      {"num_key_value_heads", c.num_kv_heads},
      {"head_dim", c.head_dim},
      {"vocab_size", c.vocab_size},
      {"max_position_embeddings", c.max_position_embeddings},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"attention_bias", c.attention_bias},
      {"hidden_act", "silu"},
      {"torch_dtype", "float32"},
  };
  if (c.rope_scaling.llama3)
    json["rope_scaling"] = {{"rope_type", "llama3"},
                            {"factor", c.rope_scaling.factor},
                            {"low_freq_factor", c.rope_scaling.low_freq_factor},
                            {"high_freq_factor", c.rope_scaling.high_freq_factor},
                            {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings}};
  return json;
}

}  // namespace pf::model
