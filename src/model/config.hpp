// The model's shape, read from a Hugging Face config.json (or a built-in preset).
// Everything downstream (weights, partition, kernels, KV pool) sizes itself from this.
// The field readers below are shared with model::shape_from_json, so that each field's
// type and range rule is written once.
#pragma once

#include <cmath>
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
  long long total_parameters() const;  // a tied lm_head shares the embedding's parameters
};

// Parses and validates; throws UserError naming the field that is missing or wrong.
ModelConfig parse_config(const nlohmann::json& json, const std::string& origin);
ModelConfig load_config_file(const std::string& path);
// The JSON of a config.json, without interpreting it (UserError if unreadable or malformed).
nlohmann::json read_config_json(const std::string& path);
// Written in the legacy layout (top-level rope_theta / rope_scaling), which both readers accept.
nlohmann::json to_json(const ModelConfig& config);

// ---- Strict field readers (type and range checked as they are read) ----
// Every failure is a UserError `<origin>: field "<name>" must be ... (got <value>)`.
namespace field {

// An integer field and its allowed range. The caps keep every product the program forms
// (hidden * vocab, heads * head_dim, ...) far inside int64 and the per-row widths inside int32.
struct IntField {
  const char* key;
  long long min;
  long long max;
};
inline constexpr long long kMaxWidth = 1LL << 24;  // hidden, intermediate, head_dim, MLA ranks
inline constexpr long long kMaxCount = 1LL << 16;  // layers, heads, experts
inline constexpr long long kMaxVocab = 1LL << 26;
inline constexpr IntField kHiddenSize{"hidden_size", 1, kMaxWidth};
inline constexpr IntField kIntermediateSize{"intermediate_size", 1, kMaxWidth};
inline constexpr IntField kNumLayers{"num_hidden_layers", 1, kMaxCount};
inline constexpr IntField kNumHeads{"num_attention_heads", 1, kMaxCount};
inline constexpr IntField kNumKvHeads{"num_key_value_heads", 1, kMaxCount};
inline constexpr IntField kHeadDim{"head_dim", 1, kMaxWidth};
inline constexpr IntField kVocabSize{"vocab_size", 1, kMaxVocab};
inline constexpr IntField kMaxPositions{"max_position_embeddings", 1, (1LL << 31) - 1};

// Reads the fields of one JSON object; `prefix` names nested objects in messages
// ("rope_parameters." gives field "rope_parameters.factor").
class Reader {
 public:
  Reader(const nlohmann::json& object, std::string origin, std::string prefix = "");
  bool has(const char* key) const;  // present and not null (null reads as absent)
  // integer() and number() require the field; the _or forms return the fallback when absent.
  int integer(const IntField& f) const;
  int integer_or(const IntField& f, int fallback) const;
  // A finite number in the open interval (above, below); `above_text` replaces the printed
  // lower bound when it is another field ("low_freq_factor (1)").
  double number(const char* key, double above, double below = HUGE_VAL, const std::string& above_text = "") const;
  double number_or(const char* key, double fallback, double above, double below = HUGE_VAL) const;
  bool boolean_or(const char* key, bool fallback) const;
  std::string string_or(const char* key, const std::string& fallback) const;
  // null / absent: a null JSON; otherwise it must be an object.
  const nlohmann::json* object(const char* key) const;
  Reader nested(const char* key) const;  // for an object returned by object()
  [[noreturn]] void fail(const std::string& name, const std::string& requirement, const nlohmann::json& got) const;
  std::string name(const char* key) const { return prefix_ + key; }
  const std::string& origin() const { return origin_; }

 private:
  const nlohmann::json& object_;
  std::string origin_;
  std::string prefix_;
};

// head_dim, or hidden_size / num_attention_heads when absent (which must then divide);
// heads * head_dim is capped like a width.
int read_head_dim(const Reader& config, int hidden_size, int num_heads);

// Rotary embedding settings from either layout: transformers 5 `rope_parameters`
// (wins when present) or the legacy top-level `rope_theta` + `rope_scaling`.
struct Rope {
  double theta = 10000.0;
  RopeScaling scaling;
  std::string type = "default";
};
// kSupported refuses rope types pipefill cannot compute (anything but default and llama3);
// kAny (cost counting only) accepts them, still checking the theta and llama3 values.
enum class RopeTypes { kSupported, kAny };
Rope read_rope(const Reader& config, RopeTypes accept);

}  // namespace field
}  // namespace pf::model
