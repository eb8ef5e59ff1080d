// config.json <-> ModelConfig: each architecture's fields by its transformers class's rules
// (the field readers themselves are config_fields.cpp).
#include "model/config.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "errors.hpp"
#include "io/file_checks.hpp"
#include "model/tensor_source.hpp"

namespace pf::model {

double ModelConfig::softmax_scale() const {
  double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  if (is_mla() && rope_scaling.yarn && rope_scaling.mscale_all_dim != 0) {
    const double m = field::yarn_mscale(rope_scaling.factor, rope_scaling.mscale_all_dim);
    scale *= m * m;
  }
  return scale;
}

long long ModelConfig::total_parameters() const {
  long long total = 0;  // every tensor of the family's list, experts and MLA's projections included
  for (const TensorSpec& spec : expected_tensors(*this)) {
    long long count = 1;
    for (int64_t d : spec.shape) count *= d;
    total += count;
  }
  return total;
}

namespace {

// Each architecture pipefill computes: its config.json name, model_type, and the defaults
// transformers' config class gives the fields that change the layer.
// Where a family's attention biases come from, as its transformers modeling file builds them.
enum class Biases {
  kQkvAlways,        // Qwen2: q/k/v biases whatever the config says
  kQkvKey,           // Qwen2-MoE: q/k/v biases if "qkv_bias" (default true)
  kEveryProjection,  // Llama, Qwen3, DeepSeek: "attention_bias" adds them to every projection, o_proj too
  kNone,             // Mixtral: never
};

// Which sliding-window fields a family's transformers code reads. The Qwen families apply a
// window only with use_sliding_window (default false; sliding_window 4096 if unsaid, none if
// null), and Qwen2, Qwen3 and Qwen2-MoE only on the layers their layer_types marks
// "sliding_attention": the config's own list, or one derived from max_window_layers (default 28).
enum class Window {
  kNone,                 // Llama, DeepSeek-V3: full attention whatever sliding_window says
  kAlways,               // Mixtral: sliding_window applies whenever it is not null
  kAskedEveryLayer,      // Qwen3-MoE: every layer when asked
  kAskedFromMaxWindow,   // Qwen2, Qwen3: layers i >= max_window_layers when asked
  kAskedAlternateBelow,  // Qwen2-MoE: even-numbered layers i < max_window_layers when asked
};
// Each family's transformers configuration class: its names and the defaults of the fields a
// config.json may leave out (a default read differently is a silently different model).
struct ArchitectureInfo {
  Architecture architecture;
  const char* name;
  const char* model_type;
  Biases biases;
  bool qk_norm;
  Window window;
  double rms_norm_eps;
  double rope_theta;
};
constexpr ArchitectureInfo kArchitectures[] = {
    {Architecture::kLlama, "LlamaForCausalLM", "llama", Biases::kEveryProjection, false, Window::kNone, 1e-6, 1e4},
    {Architecture::kQwen2, "Qwen2ForCausalLM", "qwen2", Biases::kQkvAlways, false, Window::kAskedFromMaxWindow, 1e-6,
     1e4},
    {Architecture::kQwen3, "Qwen3ForCausalLM", "qwen3", Biases::kEveryProjection, true, Window::kAskedFromMaxWindow,
     1e-6, 1e4},
    {Architecture::kMixtral, "MixtralForCausalLM", "mixtral", Biases::kNone, false, Window::kAlways, 1e-5, 1e6},
    {Architecture::kQwen2Moe, "Qwen2MoeForCausalLM", "qwen2_moe", Biases::kQkvKey, false, Window::kAskedAlternateBelow,
     1e-6, 1e4},
    {Architecture::kQwen3Moe, "Qwen3MoeForCausalLM", "qwen3_moe", Biases::kEveryProjection, true,
     Window::kAskedEveryLayer, 1e-6, 1e4},
    {Architecture::kDeepseekV3, "DeepseekV3ForCausalLM", "deepseek_v3", Biases::kEveryProjection, false, Window::kNone,
     1e-6, 1e4},
};

// The first layer a Qwen config windows (-1: none), by its layer_types or, absent, the family's
// derivation from max_window_layers.
int first_windowed_layer(const field::Reader& config, Window window, int num_layers) {
  if (window == Window::kAskedEveryLayer) return 0;
  if (const nlohmann::json* types = config.raw("layer_types")) {
    if (!types->is_array() || static_cast<int>(types->size()) != num_layers)
      config.fail("layer_types", "must list one type for each of the " + std::to_string(num_layers) + " layers",
                  *types);
    for (int i = 0; i < num_layers; ++i) {
      const nlohmann::json& type = (*types)[i];
      if (type == "sliding_attention") return i;
      if (type != "full_attention" && type != "attention")  // (transformers reads the older name as full)
        config.fail("layer_types",
                    "must hold \"full_attention\" or \"sliding_attention\" (layer " + std::to_string(i) + ")", type);
    }
    return -1;
  }
  const int max_window_layers = config.integer_or(field::IntField{"max_window_layers", 0, 1 << 30}, 28);
  if (window == Window::kAskedFromMaxWindow) return max_window_layers < num_layers ? max_window_layers : -1;
  return max_window_layers > 0 && num_layers > 0 ? 0 : -1;  // kAskedAlternateBelow: layers 0, 2, 4, ...
}

// A sliding window changes which keys a query sees; pipefill attends to the whole prompt, so
// a window the family's transformers code would apply is refused, and one it would not is read
// as the full attention it is (a Qwen config asking for a window on no layer, say).
void refuse_sliding_window(const field::Reader& config, const ArchitectureInfo& info, int num_layers) {
  switch (info.window) {
    case Window::kNone:
      return;
    case Window::kAlways:
      if (config.has("sliding_window"))
        config.fail("sliding_window",
                    std::string("must be null: ") + info.name +
                        " applies it whatever use_sliding_window says, and "
                        "pipefill computes full attention",
                    *config.raw("sliding_window"));
      return;
    case Window::kAskedEveryLayer:
    case Window::kAskedFromMaxWindow:
    case Window::kAskedAlternateBelow: {
      if (!config.boolean_or("use_sliding_window", false)) {
        // A layer_types that marks a layer sliding anyway has no window size to take: Qwen2-MoE
        // then windows it at 0 keys, Qwen2 and Qwen3 fail to build it. Neither is full attention.
        if (info.window != Window::kAskedEveryLayer && config.has("layer_types")) {
          const int layer = first_windowed_layer(config, info.window, num_layers);
          if (layer >= 0)
            config.fail("layer_types",
                        "must not mark a layer \"sliding_attention\" while use_sliding_window is false (layer " +
                            std::to_string(layer) + "): " + info.name + " has no window for it",
                        *config.raw("layer_types"));
        }
        return;
      }
      if (config.present("sliding_window") && !config.has("sliding_window")) {  // null: no window, unless...
        // ... Qwen2-MoE, which builds a window mask whatever its layers, or a layer_types that
        // still marks a layer sliding: transformers has no window size for them and fails.
        if (info.window == Window::kAskedAlternateBelow)
          config.fail("sliding_window",
                      "must not be null with use_sliding_window true: " + std::string(info.name) +
                          " builds a window mask for it (transformers fails); set use_sliding_window false",
                      nullptr);
        const int layer = info.window == Window::kAskedFromMaxWindow && config.has("layer_types")
                              ? first_windowed_layer(config, info.window, num_layers)
                              : -1;
        if (layer >= 0)
          config.fail("layer_types",
                      "must not mark a layer \"sliding_attention\" while sliding_window is null (layer " +
                          std::to_string(layer) + "): " + info.name + " has no window for it",
                      *config.raw("layer_types"));
        return;
      }
      const int layer = first_windowed_layer(config, info.window, num_layers);
      if (layer < 0) return;  // asked, but on no layer: full attention throughout
      const char* why = info.window == Window::kAskedEveryLayer ? "every layer"
                        : config.has("layer_types")             ? "layer_types"
                                                                : "max_window_layers";
      config.fail("use_sliding_window",
                  "must be false (or sliding_window null): pipefill computes full attention, and " +
                      std::string(info.name) + " would window layer " + std::to_string(layer) + " (" + why +
                      (config.present("sliding_window") ? ")" : "; an absent sliding_window is transformers' 4096)"),
                  true);
    }
  }
}

// q/k/v biases, by the family's rule; biases pipefill does not compute (o_proj's, DeepSeek's
// LoRA projections', Llama's MLP's) are refused rather than left out of the sum.
bool read_attention_bias(const field::Reader& config, const ArchitectureInfo& info) {
  if (info.architecture == Architecture::kLlama && config.boolean_or("mlp_bias", false))
    config.fail("mlp_bias", "must be false: pipefill's MLP has no biases", true);
  switch (info.biases) {
    case Biases::kQkvAlways:
      return true;
    case Biases::kQkvKey:
      return config.boolean_or("qkv_bias", true);
    case Biases::kNone:
      return false;
    case Biases::kEveryProjection:
      if (config.boolean_or("attention_bias", false))
        config.fail("attention_bias",
                    std::string("must be false: for ") + info.name +
                        " it adds a bias to o_proj too (and to DeepSeek's q_a and kv_a), which pipefill does not "
                        "compute",
                    true);
      return false;
  }
  return false;
}

const ArchitectureInfo& info_of(Architecture architecture) {
  for (const auto& info : kArchitectures)
    if (info.architecture == architecture) return info;
  throw std::logic_error("unknown Architecture");
}

const ArchitectureInfo& info_named(const std::string& name, const std::string& origin) {
  std::string supported;
  for (const auto& info : kArchitectures) {
    if (name == info.name) return info;
    supported += std::string(supported.empty() ? "" : ", ") + info.name;
  }
  throw UserError(origin + ": unknown architecture \"" + name + "\" (supported: " + supported + ")");
}

// A string field that must hold one of the values pipefill computes (or be absent).
void require_value_or_absent(const field::Reader& config, const char* key, const std::string& wanted,
                             const std::string& why) {
  if (config.has(key) && config.string_or(key, wanted) != wanted)
    config.fail(key, "must be \"" + wanted + "\": " + why, *config.raw(key));
}

// The routed experts and how tokens choose them, per family (transformers' semantics).
MoeConfig read_moe(const field::Reader& config, const ModelConfig& c) {
  using namespace field;
  MoeConfig moe;
  const Architecture a = c.architecture;
  if (a == Architecture::kMixtral) {
    moe.experts = config.integer(kLocalExperts);
    moe.intermediate = c.intermediate_size;  // Mixtral's experts are as wide as its dense MLP would be
    moe.norm_topk_prob = true;               // Mixtral always renormalises the chosen weights
  } else if (a == Architecture::kDeepseekV3) {
    moe.experts = config.integer(kRoutedExperts);
    moe.intermediate = config.integer(kMoeIntermediateSize);
  } else {
    moe.experts = config.has(kNumExperts.key) ? config.integer(kNumExperts) : config.integer(kLocalExperts);
    moe.intermediate = config.integer(kMoeIntermediateSize);
  }
  if (moe.experts < 1) config.fail("num_experts", "must be at least 1 for " + c.architecture_name, moe.experts);
  moe.experts_per_token = config.integer(kExpertsPerToken);
  if (moe.experts_per_token > moe.experts)
    config.fail(kExpertsPerToken.key, "must be at most the number of experts (" + std::to_string(moe.experts) + ")",
                moe.experts_per_token);
  if (a != Architecture::kMixtral)
    moe.norm_topk_prob = config.boolean_or("norm_topk_prob", a == Architecture::kDeepseekV3);
  if (a == Architecture::kQwen2Moe) {
    moe.shared_intermediate = config.integer(kSharedExpertSize);
    moe.shared_expert_gate = moe.shared_intermediate > 0;
  }
  if (a == Architecture::kDeepseekV3) {
    // DeepSeek-V3's router: transformers computes only this one (V2's softmax and greedy
    // methods are other models), so a config naming another is refused, not misread.
    require_value_or_absent(config, "scoring_func", "sigmoid", "DeepseekV3 routes by sigmoid scores");
    require_value_or_absent(config, "topk_method", "noaux_tc",
                            "DeepseekV3 chooses experts by group-limited top-k with e_score_correction_bias");
    moe.router = Router::kSigmoidGrouped;
    moe.score_correction_bias = true;
    const long long shared = static_cast<long long>(config.integer_or(kSharedExperts, 0)) * moe.intermediate;
    if (shared > kMaxWidth)
      config.fail(kSharedExperts.key, "times moe_intermediate_size must be at most " + std::to_string(kMaxWidth),
                  config.integer_or(kSharedExperts, 0));
    moe.shared_intermediate = static_cast<int>(shared);
    // DeepseekV3Config's defaults (those of DeepSeek-V3 itself).
    moe.routed_scaling_factor = config.number_or("routed_scaling_factor", 2.5, 0.0);
    moe.groups = config.integer_or(kGroups, 8);
    moe.topk_groups = config.integer_or(kTopkGroups, 4);
    // A refusal of a value the file does not give says where it came from.
    const std::string groups_from = config.has(kGroups.key) ? "" : " (absent: transformers' default 8)";
    if (moe.experts % moe.groups != 0)
      config.fail(kGroups.key, "must divide the " + std::to_string(moe.experts) + " routed experts" + groups_from,
                  moe.groups);
    if (moe.experts / moe.groups < 2)  // a group scores by its best two experts
      config.fail(kGroups.key, "must leave at least 2 experts per group" + groups_from, moe.groups);
    if (moe.topk_groups > moe.groups)
      config.fail(kTopkGroups.key, "must be at most n_group (" + std::to_string(moe.groups) + ")", moe.topk_groups);
    if (moe.experts_per_token > moe.topk_groups * (moe.experts / moe.groups))
      config.fail(kExpertsPerToken.key,
                  "must be at most the experts of the topk_group eligible groups (" +
                      std::to_string(moe.topk_groups * (moe.experts / moe.groups)) + ")",
                  moe.experts_per_token);
  }
  moe.sparse_layer = read_sparse_layers(config, c.architecture_name, c.num_layers);
  return moe;
}

MlaConfig read_mla(const field::Reader& config) {
  using namespace field;
  MlaConfig mla;
  mla.q_lora_rank = config.integer_or(kQLoraRank, 0);  // null: a plain q_proj
  mla.kv_lora_rank = config.integer(kKvLoraRank);
  if (mla.kv_lora_rank < 1) config.fail(kKvLoraRank.key, "must be at least 1", mla.kv_lora_rank);
  mla.qk_nope_head_dim = config.integer(kQkNopeHeadDim);
  mla.qk_rope_head_dim = config.integer(kQkRopeHeadDim);
  mla.v_head_dim = config.integer(kVHeadDim);
  mla.rope_interleave = config.boolean_or("rope_interleave", true);
  if (mla.qk_rope_head_dim < 2 || mla.qk_rope_head_dim % 2 != 0)
    config.fail(kQkRopeHeadDim.key, "must be even and at least 2 (RoPE rotates pairs)", mla.qk_rope_head_dim);
  return mla;
}

}  // namespace

ModelConfig parse_config(const nlohmann::json& json, const std::string& origin) {
  using namespace field;
  if (!json.is_object()) throw UserError(origin + ": not a JSON object");
  const Reader config(json, origin);
  ModelConfig c;
  field::refuse_architectures_string(json, origin);
  auto architectures = json.value("architectures", nlohmann::json::array());
  if (!architectures.is_array() || architectures.empty() || !architectures[0].is_string())
    throw UserError(origin + ": missing \"architectures\" (e.g. [\"LlamaForCausalLM\"])");
  c.architecture_name = architectures[0].get<std::string>();
  const ArchitectureInfo& info = info_named(c.architecture_name, origin);
  c.architecture = info.architecture;
  // transformers builds the model model_type names, whatever architectures says.
  const std::string model_type = config.string_or("model_type", info.model_type);
  if (model_type != info.model_type)
    config.fail("model_type",
                std::string("must be \"") + info.model_type + "\" for " + info.name +
                    " (transformers builds the model model_type names; the two must agree)",
                model_type);
  c.hidden_size = config.integer(kHiddenSize);
  c.intermediate_size = config.integer(kIntermediateSize);
  c.num_layers = config.integer(kNumLayers);
  c.num_heads = config.integer(kNumHeads);
  c.num_kv_heads = config.integer_or(kNumKvHeads, c.num_heads);
  c.vocab_size = config.integer(kVocabSize);
  c.max_position_embeddings = config.integer_or(kMaxPositions, 1 << 30);
  c.rms_norm_eps = config.number_or("rms_norm_eps", info.rms_norm_eps, 0.0, 1.0);
  const Rope rope = read_rope(config, RopeTypes::kSupported, info.rope_theta);
  c.rope_theta = rope.theta;
  c.rope_scaling = rope.scaling;
  c.tie_word_embeddings = config.boolean_or("tie_word_embeddings", false);
  c.attention_bias = read_attention_bias(config, info);
  c.qk_norm = info.qk_norm;
  require_value_or_absent(config, "hidden_act", "silu", "pipefill's feed-forward is SwiGLU");
  refuse_sliding_window(config, info, c.num_layers);
  if (c.architecture == Architecture::kDeepseekV3) {
    // transformers scales MLA's softmax by mscale_all_dim for any rope type but default;
    // pipefill reads that correction with YaRN's fields only.
    if (!rope.scaling.yarn && rope.type != "default")
      throw UserError(origin + ": DeepseekV3 with rope type \"" + rope.type +
                      "\": pipefill computes its latent attention with the default or yarn rope only");
    c.mla = read_mla(config);
    c.head_dim = c.mla.qk_nope_head_dim + c.mla.qk_rope_head_dim;  // the q.k width
    c.num_kv_heads = c.num_heads;  // MLA's heads each get their own k and v from the latent
  } else {
    c.head_dim = read_head_dim(config, c.hidden_size, c.num_heads);
    if (c.num_heads % c.num_kv_heads != 0)
      throw UserError(origin + ": num_attention_heads must be a multiple of num_key_value_heads");
    if (c.head_dim % 2 != 0) throw UserError(origin + ": head_dim must be even for RoPE");
  }
  if (c.architecture == Architecture::kMixtral || c.architecture == Architecture::kQwen2Moe ||
      c.architecture == Architecture::kQwen3Moe || c.architecture == Architecture::kDeepseekV3)
    c.moe = read_moe(config, c);
  return c;
}

std::string config_json_path(const std::string& path) {
  std::error_code error;
  return std::filesystem::is_directory(path, error) ? (std::filesystem::path(path) / "config.json").string() : path;
}

nlohmann::json read_config_json(const std::string& given) {
  const std::string path = config_json_path(given);
  io::require_regular_file(path, "model config");  // a directory would read as empty, a FIFO block
  std::ifstream in(path);
  if (!in) throw UserError("cannot read model config " + path);
  nlohmann::json json;
  try {
    // parse() and not `in >> json`: the stream operator stops after the first value, so a
    // config.json with anything after it (two objects, a stray brace) would read as the first,
    // where Python's json (transformers) refuses it.
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw UserError(path + ": malformed JSON (" + std::string(e.what()) + ")");
  }
  return json;
}

ModelConfig load_config_file(const std::string& path) {
  return parse_config(read_config_json(path), path);
}

namespace {

// The MoE fields in the family's own names, so that parse_config reads them back.
void add_moe_json(const ModelConfig& c, nlohmann::json& json) {
  const MoeConfig& m = c.moe;
  json["num_experts_per_tok"] = m.experts_per_token;
  if (c.architecture == Architecture::kMixtral) {
    json["num_local_experts"] = m.experts;
    return;
  }
  json["moe_intermediate_size"] = m.intermediate;
  json["norm_topk_prob"] = m.norm_topk_prob;
  if (c.architecture == Architecture::kDeepseekV3) {
    int dense = 0;
    while (dense < c.num_layers && !m.sparse_layer[dense]) ++dense;
    json["n_routed_experts"] = m.experts;
    json["n_shared_experts"] = m.shared_intermediate / m.intermediate;
    json["first_k_dense_replace"] = dense;
    json["n_group"] = m.groups;
    json["topk_group"] = m.topk_groups;
    json["routed_scaling_factor"] = m.routed_scaling_factor;
    return;
  }
  json["num_experts"] = m.experts;
  if (c.architecture == Architecture::kQwen2Moe) json["shared_expert_intermediate_size"] = m.shared_intermediate;
  nlohmann::json dense = nlohmann::json::array();
  for (int layer = 0; layer < c.num_layers; ++layer)
    if (!m.sparse_layer[layer]) dense.push_back(layer);
  json["mlp_only_layers"] = dense;  // with decoder_sparse_step 1 (the default), the dense layers exactly
}

}  // namespace

nlohmann::json to_json(const ModelConfig& c) {
  nlohmann::json json = {
      {"architectures", {c.architecture_name}},
      {"model_type", info_of(c.architecture).model_type},
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
  const RopeScaling& r = c.rope_scaling;
  if (r.llama3)
    json["rope_scaling"] = {{"rope_type", "llama3"},
                            {"factor", r.factor},
                            {"low_freq_factor", r.low_freq_factor},
                            {"high_freq_factor", r.high_freq_factor},
                            {"original_max_position_embeddings", r.original_max_position_embeddings}};
  if (r.yarn)
    json["rope_scaling"] = {{"rope_type", "yarn"},
                            {"factor", r.factor},
                            {"beta_fast", r.beta_fast},
                            {"beta_slow", r.beta_slow},
                            {"mscale", r.mscale},
                            {"mscale_all_dim", r.mscale_all_dim},
                            {"attention_factor", r.attention_factor},
                            {"truncate", r.truncate},
                            {"original_max_position_embeddings", r.original_max_position_embeddings}};
  if (c.architecture == Architecture::kQwen2Moe) json["qkv_bias"] = c.attention_bias;
  if (c.is_mla()) {
    json.erase("head_dim");
    json["q_lora_rank"] = c.mla.q_lora_rank > 0 ? nlohmann::json(c.mla.q_lora_rank) : nlohmann::json();
    json["kv_lora_rank"] = c.mla.kv_lora_rank;
    json["qk_nope_head_dim"] = c.mla.qk_nope_head_dim;
    json["qk_rope_head_dim"] = c.mla.qk_rope_head_dim;
    json["v_head_dim"] = c.mla.v_head_dim;
    json["rope_interleave"] = c.mla.rope_interleave;
  }
  if (c.is_moe()) add_moe_json(c, json);
  return json;
}

}  // namespace pf::model
