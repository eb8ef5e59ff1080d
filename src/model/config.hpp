// The model's shape, read from a Hugging Face config.json (or a built-in preset).
// Everything downstream (weights, partition, kernels, KV pool) sizes itself from this.
// The field readers below are shared with model::shape_from_json, so that each field's
// type and range rule is written once.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace pf::model {

enum class Architecture { kLlama, kQwen2, kQwen3, kMixtral, kQwen2Moe, kQwen3Moe, kDeepseekV3 };

// rope_scaling of type "llama3" (Llama 3.1+): frequencies below a wavelength band are
// divided by `factor`, those above kept, those inside interpolated smoothly.
// Of type "yarn" (DeepSeek-V3): frequencies ramp between extrapolated and interpolated
// over the band [beta_fast, beta_slow] rotations, cos/sin are scaled by attention_factor,
// and MLA's softmax scale by mscale(factor, mscale_all_dim)^2.
struct RopeScaling {
  bool llama3 = false;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position_embeddings = 8192;
  bool yarn = false;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;            // 0: absent
  double mscale_all_dim = 0.0;    // 0: absent
  double attention_factor = 1.0;  // read, or derived from factor and the two mscales
  bool truncate = true;
};

// How a token picks its experts.
enum class Router {
  kSoftmax,         // softmax over every expert, then the top k (Mixtral, Qwen MoE)
  kSigmoidGrouped,  // sigmoid scores; top k chosen with a bias among the best groups (DeepSeek-V3)
};

// Mixture of experts (experts == 0: a dense model). Each TP rank holds a slice of every
// expert's intermediate width (docs/choices.md: experts inside the TP group).
struct MoeConfig {
  int experts = 0;                  // routed experts
  int experts_per_token = 0;        // top k
  int intermediate = 0;             // each routed expert's width
  int shared_intermediate = 0;      // the always-on shared expert's width (0: none)
  bool shared_expert_gate = false;  // Qwen2-MoE: sigmoid(x . w) scales the shared expert
  Router router = Router::kSoftmax;
  bool norm_topk_prob = false;  // renormalise the k chosen weights to sum to 1
  double routed_scaling_factor = 1.0;
  int groups = 1;                      // n_group: experts split into groups ...
  int topk_groups = 1;                 // ... of which the best topk_group are eligible
  bool score_correction_bias = false;  // e_score_correction_bias (chooses, does not weigh)
  std::vector<bool> sparse_layer;      // per layer: MoE (true) or the dense MLP
};

// Multi-head latent attention (DeepSeek-V2/V3); kv_lora_rank == 0: grouped-query attention.
// The KV cache holds per token only the normed latent (kv_lora_rank) and the shared rope
// key (qk_rope_head_dim), for all heads.
struct MlaConfig {
  int q_lora_rank = 0;  // 0: a plain q_proj
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  bool rope_interleave = true;  // rope pairs (x0, x1), (x2, x3)...: rows are permuted at load
  int latent_width() const { return kv_lora_rank + qk_rope_head_dim; }
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
  MoeConfig moe;
  MlaConfig mla;

  bool is_moe() const { return moe.experts > 0; }
  bool is_mla() const { return mla.kv_lora_rank > 0; }
  bool moe_layer(int layer) const { return is_moe() && moe.sparse_layer.at(static_cast<size_t>(layer)); }
  // The rotated width of a head: head_dim, or MLA's qk_rope_head_dim.
  int rope_dim() const { return is_mla() ? mla.qk_rope_head_dim : head_dim; }
  // 1/sqrt(q.k width), times YaRN's mscale(factor, mscale_all_dim)^2 for MLA.
  double softmax_scale() const;
  // For MLA, head_dim is the q/k width (qk_nope + qk_rope).
  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }
  // Parameters the model stores (every expert; a tied lm_head shares the embedding's).
  long long total_parameters() const;
};

// Parses and validates; throws UserError naming the field that is missing or wrong.
ModelConfig parse_config(const nlohmann::json& json, const std::string& origin);
ModelConfig load_config_file(const std::string& path);
// The JSON of a config.json, without interpreting it (UserError if unreadable or malformed).
// A model directory's config.json, else the path as given (a config.json itself).
std::string config_json_path(const std::string& path);
nlohmann::json read_config_json(const std::string& path);  // a model directory reads its config.json
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
// Mixture of experts and multi-head latent attention; 0 means absent where the minimum is 0.
inline constexpr IntField kNumExperts{"num_experts", 0, kMaxCount};          // Qwen MoE
inline constexpr IntField kLocalExperts{"num_local_experts", 0, kMaxCount};  // Mixtral
inline constexpr IntField kRoutedExperts{"n_routed_experts", 0, kMaxCount};  // DeepSeek
inline constexpr IntField kExpertsPerToken{"num_experts_per_tok", 1, kMaxCount};
inline constexpr IntField kMoeIntermediateSize{"moe_intermediate_size", 1, kMaxWidth};
inline constexpr IntField kSharedExperts{"n_shared_experts", 0, kMaxCount};
inline constexpr IntField kSharedExpertSize{"shared_expert_intermediate_size", 0, kMaxWidth};
inline constexpr IntField kFirstDenseLayers{"first_k_dense_replace", 0, kMaxCount};
inline constexpr IntField kSparseStep{"decoder_sparse_step", 1, kMaxCount};
inline constexpr IntField kGroups{"n_group", 1, kMaxCount};
inline constexpr IntField kTopkGroups{"topk_group", 1, kMaxCount};
inline constexpr IntField kKvLoraRank{"kv_lora_rank", 0, kMaxWidth};
inline constexpr IntField kQLoraRank{"q_lora_rank", 0, kMaxWidth};
inline constexpr IntField kQkRopeHeadDim{"qk_rope_head_dim", 0, kMaxWidth};
inline constexpr IntField kQkNopeHeadDim{"qk_nope_head_dim", 0, kMaxWidth};
inline constexpr IntField kVHeadDim{"v_head_dim", 1, kMaxWidth};

// Reads the fields of one JSON object; `prefix` names nested objects in messages
// ("rope_parameters." gives field "rope_parameters.factor").
class Reader {
 public:
  Reader(const nlohmann::json& object, std::string origin, std::string prefix = "");
  bool has(const char* key) const;      // present and not null (null reads as absent)
  bool present(const char* key) const;  // present, null included
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
  const nlohmann::json* raw(const char* key) const { return has(key) ? &object_[key] : nullptr; }
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

// "architectures" written as one name instead of a list of them: refused, naming the fix (both
// readers of config.json, the strict one and the cost models', then read the list their way).
void refuse_architectures_string(const nlohmann::json& config, const std::string& origin);

// The dense layers of an MoE model, by each family's own rule: Qwen's mlp_only_layers and
// decoder_sparse_step, DeepSeek's first_k_dense_replace, Mixtral none. `family` is the
// architecture name ("Qwen3MoeForCausalLM"); true marks an MoE layer.
std::vector<bool> read_sparse_layers(const Reader& config, const std::string& family, int num_layers);

// Rotary embedding settings from either layout: transformers 5 `rope_parameters`
// (wins when present) or the legacy top-level `rope_theta` + `rope_scaling`.
struct Rope {
  double theta = 10000.0;
  RopeScaling scaling;
  std::string type = "default";
};
// kSupported refuses rope types pipefill cannot compute (anything but default, llama3, yarn);
// kAny (cost counting only) accepts them, still checking the theta and llama3 values.
enum class RopeTypes { kSupported, kAny };
// YaRN's magnitude correction 0.1 m ln(scale) + 1 (1 when scale <= 1).
double yarn_mscale(double scale, double mscale);
// default_theta: the family's own when neither layout gives one (transformers' class default:
// 10000, Mixtral's 1e6).
Rope read_rope(const Reader& config, RopeTypes accept, double default_theta = 10000.0);

}  // namespace field
}  // namespace pf::model
