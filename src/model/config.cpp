// config.json <-> ModelConfig. Field names follow Hugging Face transformers; both rope
// layouts are read: transformers 5 `rope_parameters` and the older top-level keys.
#include "model/config.hpp"

#include <cstdio>
#include <fstream>

#include "errors.hpp"

namespace pf::model {
namespace field {
namespace {

// What a message shows of an offending value: its JSON text, cut short for large objects.
std::string shown(const nlohmann::json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

std::string bound_text(double bound) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", bound);
  return text;
}

void read_llama3(const Reader& scaling, RopeScaling& s) {
  s.llama3 = true;
  s.factor = scaling.number("factor", 0.0);
  s.low_freq_factor = scaling.number("low_freq_factor", 0.0);
  // The smoothing between the two wavelength bands divides by (high - low).
  s.high_freq_factor = scaling.number("high_freq_factor", s.low_freq_factor, HUGE_VAL,
                                      "low_freq_factor (" + bound_text(s.low_freq_factor) + ")");
  s.original_max_position_embeddings = scaling.number("original_max_position_embeddings", 0.0);
}

// The type-specific part of a rope object; `type_key` is where its type was written.
void read_scaling(const Reader& scaling, const char* type_key, Rope& rope, RopeTypes accept) {
  rope.type = scaling.string_or(type_key, "default");
  if (rope.type == "default") return;
  if (rope.type == "llama3") return read_llama3(scaling, rope.scaling);
  if (accept == RopeTypes::kSupported)
    scaling.fail(scaling.name(type_key), "must be \"default\" or \"llama3\", the rope types pipefill computes",
                 rope.type);
}

}  // namespace

Reader::Reader(const nlohmann::json& object, std::string origin, std::string prefix)
    : object_(object), origin_(std::move(origin)), prefix_(std::move(prefix)) {}

bool Reader::has(const char* key) const {
  return object_.contains(key) && !object_[key].is_null();
}

void Reader::fail(const std::string& name, const std::string& requirement, const nlohmann::json& got) const {
  throw UserError(origin_ + ": field \"" + name + "\" " + requirement + " (got " + shown(got) + ")");
}

int Reader::integer(const IntField& f) const {
  if (!has(f.key)) throw UserError(origin_ + ": missing field \"" + name(f.key) + "\"");
  const nlohmann::json& value = object_[f.key];
  // Unsigned first: a value above INT64_MAX must not wrap into range.
  bool in_range = false;
  long long read = 0;
  if (value.is_number_unsigned()) {
    const auto u = value.get<unsigned long long>();
    in_range = u <= static_cast<unsigned long long>(f.max) && static_cast<long long>(u) >= f.min;
    read = static_cast<long long>(u);
  } else if (value.is_number_integer()) {
    read = value.get<long long>();
    in_range = read >= f.min && read <= f.max;
  }
  if (!in_range)
    fail(name(f.key), "must be an integer in [" + std::to_string(f.min) + ", " + std::to_string(f.max) + "]", value);
  return static_cast<int>(read);
}

int Reader::integer_or(const IntField& f, int fallback) const {
  return has(f.key) ? integer(f) : fallback;
}

double Reader::number(const char* key, double above, double below, const std::string& above_text) const {
  if (!has(key)) throw UserError(origin_ + ": missing field \"" + name(key) + "\"");
  const nlohmann::json& value = object_[key];
  if (value.is_number()) {  // integers count: transformers writes rope_theta 500000 as an int
    const double read = value.get<double>();
    if (std::isfinite(read) && read > above && read < below) return read;
  }
  std::string requirement = "must be a finite number";
  if (above > -HUGE_VAL) requirement += " > " + (above_text.empty() ? bound_text(above) : above_text);
  if (below < HUGE_VAL) requirement += " and < " + bound_text(below);
  fail(name(key), requirement, value);
}

double Reader::number_or(const char* key, double fallback, double above, double below) const {
  return has(key) ? number(key, above, below) : fallback;
}

bool Reader::boolean_or(const char* key, bool fallback) const {
  if (!has(key)) return fallback;
  if (!object_[key].is_boolean()) fail(name(key), "must be true or false", object_[key]);
  return object_[key].get<bool>();
}

std::string Reader::string_or(const char* key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  if (!object_[key].is_string()) fail(name(key), "must be a string", object_[key]);
  return object_[key].get<std::string>();
}

const nlohmann::json* Reader::object(const char* key) const {
  if (!has(key)) return nullptr;
  if (!object_[key].is_object()) fail(name(key), "must be an object or null", object_[key]);
  return &object_[key];
}

Reader Reader::nested(const char* key) const {
  return Reader(*object(key), origin_, name(key) + ".");
}

int read_head_dim(const Reader& config, int hidden_size, int num_heads) {
  int head_dim;
  if (config.has(kHeadDim.key)) {
    head_dim = config.integer(kHeadDim);
  } else {
    if (hidden_size % num_heads != 0)
      config.fail(config.name(kHiddenSize.key),
                  "must divide by num_attention_heads (" + std::to_string(num_heads) + ") when head_dim is absent",
                  hidden_size);
    head_dim = hidden_size / num_heads;
  }
  // q_dim() = heads * head_dim is an int and a row width of the q projection.
  if (static_cast<long long>(num_heads) * head_dim > kMaxWidth)
    config.fail(config.name(kNumHeads.key),
                "times head_dim (" + std::to_string(head_dim) + ") must be at most " + std::to_string(kMaxWidth),
                num_heads);
  return head_dim;
}

Rope read_rope(const Reader& config, RopeTypes accept) {
  Rope rope;
  if (config.object("rope_parameters")) {  // transformers 5: everything in one object
    const Reader parameters = config.nested("rope_parameters");
    // Models that mix attention kinds key one rope object per layer type; none of ours does.
    for (const auto& [key, value] : config.object("rope_parameters")->items())
      if (value.is_object())
        parameters.fail(parameters.name(key.c_str()), "is a per-layer-type rope object, which pipefill does not read",
                        value);
    rope.theta = parameters.has("rope_theta") ? parameters.number("rope_theta", 0.0)
                                              : config.number_or("rope_theta", 10000.0, 0.0);
    read_scaling(parameters, "rope_type", rope, accept);
    return rope;
  }
  rope.theta = config.number_or("rope_theta", 10000.0, 0.0);
  if (config.object("rope_scaling")) {
    const Reader scaling = config.nested("rope_scaling");
    read_scaling(scaling, scaling.has("rope_type") ? "rope_type" : "type", rope, accept);
  }
  return rope;
}

}  // namespace field

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
  using namespace field;
  if (!json.is_object()) throw UserError(origin + ": not a JSON object");
  const Reader config(json, origin);
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
  c.hidden_size = config.integer(kHiddenSize);
  c.intermediate_size = config.integer(kIntermediateSize);
  c.num_layers = config.integer(kNumLayers);
  c.num_heads = config.integer(kNumHeads);
  c.num_kv_heads = config.integer_or(kNumKvHeads, c.num_heads);
  c.vocab_size = config.integer(kVocabSize);
  c.head_dim = read_head_dim(config, c.hidden_size, c.num_heads);
  c.max_position_embeddings = config.integer_or(kMaxPositions, 1 << 30);
  c.rms_norm_eps = config.number_or("rms_norm_eps", 1e-6, 0.0, 1.0);
  const Rope rope = read_rope(config, RopeTypes::kSupported);
  c.rope_theta = rope.theta;
  c.rope_scaling = rope.scaling;
  c.tie_word_embeddings = config.boolean_or("tie_word_embeddings", false);
  c.attention_bias = config.boolean_or("attention_bias", c.architecture == Architecture::kQwen2);
  c.qk_norm = c.architecture == Architecture::kQwen3;

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

ModelConfig load_config_file(const std::string& path) {
  return parse_config(read_config_json(path), path);
}

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
