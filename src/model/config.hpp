// The model's shape, read from a Hugging Face config.json (or a built-in preset).
// Everything downstream (weights, partition, kernels, KV pool) sizes itself from this.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace pf::model {

enum class Architecture { kLlama, kQwen2, kQwen3 };

// rope_scaling of type "llama3" (Llama 3.1+): frequencies below a wavelength band are
// divided by `factor`, those above kept, those inside interpolated smoothly.
struct RopeScaling {
  bool llama3 = false;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position_embeddings = 8192;
};

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  std::string architecture_name = "LlamaForCausalLM";
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int vocab_size = 0;
  int max_position_embeddings = 0;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v biases (Qwen2)
  bool qk_norm = false;         // per-head RMSNorm on q and k before RoPE (Qwen3)

  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }
  // Parameters of one decoder layer and of the whole model (for FLOP counts and sizes).
  long long layer_parameters() const;
  long long total_parameters() const;
};

// Parses and validates; throws UserError naming the field that is missing or wrong.
ModelConfig parse_config(const nlohmann::json& json, const std::string& origin);
ModelConfig load_config_file(const std::string& path);
// The JSON of a config.json, without interpreting it (UserError if unreadable or malformed).
nlohmann::json read_config_json(const std::string& path);
nlohmann::json to_json(const ModelConfig& config);

}  // namespace pf::model
