// The strict readers of config.json's fields (model::field, declared in config.hpp): each
// field's type and range checked as it is read, and the rope settings of either layout.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "errors.hpp"
#include "model/config.hpp"

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

// The pretraining length llama3 and yarn scale from, as transformers' standardize_rope_params
// settles it: a top-level original_max_position_embeddings wins over the rope object's (Phi-3
// writes it there), and without either it is max_position_embeddings.
double original_length(const Reader& scaling, const Reader& config) {
  if (config.has("original_max_position_embeddings")) return config.number("original_max_position_embeddings", 0.0);
  if (scaling.has("original_max_position_embeddings")) return scaling.number("original_max_position_embeddings", 0.0);
  if (config.has("max_position_embeddings")) return config.number("max_position_embeddings", 0.0);
  throw UserError(config.origin() + ": missing field \"" + scaling.name("original_max_position_embeddings") + "\"");
}

void read_llama3(const Reader& scaling, const Reader& config, RopeScaling& s) {
  s.llama3 = true;
  s.factor = scaling.number("factor", 0.0);
  s.low_freq_factor = scaling.number("low_freq_factor", 0.0);
  // The smoothing between the two wavelength bands divides by (high - low).
  s.high_freq_factor = scaling.number("high_freq_factor", s.low_freq_factor, HUGE_VAL,
                                      "low_freq_factor (" + bound_text(s.low_freq_factor) + ")");
  s.original_max_position_embeddings = original_length(scaling, config);
}

// YaRN as transformers' _compute_yarn_parameters reads it (DeepSeek-V3, Qwen long context).
}  // namespace

double yarn_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

namespace {

void read_yarn(const Reader& scaling, const Reader& config, double max_positions, RopeScaling& s) {
  s.yarn = true;
  s.original_max_position_embeddings = original_length(scaling, config);
  // A null factor is max_position_embeddings over the pretraining length (DeepSeek-V3 writes
  // it so); no factor at all is a config transformers refuses (a required key).
  if (!scaling.present("factor"))
    throw UserError(config.origin() + ": missing field \"" + scaling.name("factor") + "\"");
  s.factor = scaling.has("factor") ? scaling.number("factor", 0.0) : max_positions / s.original_max_position_embeddings;
  // transformers reads `or 32` / `or 1`: a 0 or null means the default.
  s.beta_fast = scaling.number_or("beta_fast", 32.0, -HUGE_VAL);
  s.beta_slow = scaling.number_or("beta_slow", 1.0, -HUGE_VAL);
  if (s.beta_fast == 0) s.beta_fast = 32.0;
  if (s.beta_slow == 0) s.beta_slow = 1.0;
  s.mscale = scaling.number_or("mscale", 0.0, -HUGE_VAL);
  s.mscale_all_dim = scaling.number_or("mscale_all_dim", 0.0, -HUGE_VAL);
  s.truncate = scaling.boolean_or("truncate", true);
  if (scaling.has("attention_factor"))
    s.attention_factor = scaling.number("attention_factor", 0.0);
  else if (s.mscale != 0 && s.mscale_all_dim != 0)
    s.attention_factor = yarn_mscale(s.factor, s.mscale) / yarn_mscale(s.factor, s.mscale_all_dim);
  else
    s.attention_factor = yarn_mscale(s.factor, 1.0);
}

// The type-specific part of a rope object: its type under "rope_type", or the older "type"
// (transformers reads either, in both layouts).
void read_scaling(const Reader& scaling, const Reader& config, double max_positions, Rope& rope, RopeTypes accept) {
  const char* type_key = scaling.has("rope_type") ? "rope_type" : "type";
  rope.type = scaling.string_or(type_key, "default");
  if (rope.type == "default") return;  // (these families' default rope ignores partial_rotary_factor)
  // transformers' scaled types rotate head_dim x partial_rotary_factor dimensions, which these
  // families' attention cannot apply (it fails); pipefill rotates them all.
  for (const Reader* where : {&scaling, &config})
    if (where->has("partial_rotary_factor") && where->number("partial_rotary_factor", 0.0) != 1.0)
      where->fail(where->name("partial_rotary_factor"),
                  "must be 1 with rope type \"" + rope.type + "\": pipefill rotates every dimension of a head",
                  *where->raw("partial_rotary_factor"));
  if (rope.type == "llama3") return read_llama3(scaling, config, rope.scaling);
  if (rope.type == "yarn") return read_yarn(scaling, config, max_positions, rope.scaling);
  if (accept == RopeTypes::kSupported)
    scaling.fail(scaling.name(type_key),
                 "must be \"default\", \"llama3\" or \"yarn\", the rope types pipefill computes", rope.type);
}

}  // namespace

Reader::Reader(const nlohmann::json& object, std::string origin, std::string prefix)
    : object_(object), origin_(std::move(origin)), prefix_(std::move(prefix)) {}

bool Reader::has(const char* key) const {
  return object_.contains(key) && !object_[key].is_null();
}

bool Reader::present(const char* key) const {
  return object_.contains(key);
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

void refuse_architectures_string(const nlohmann::json& config, const std::string& origin) {
  const auto it = config.find("architectures");
  if (it != config.end() && it->is_string())
    throw UserError(origin + ": field \"architectures\" must be a list of names, e.g. [" + it->dump() +
                    "] (got the string " + it->dump() + ")");
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

namespace {

bool same_scaling(const Rope& a, const Rope& b) {
  const RopeScaling &x = a.scaling, &y = b.scaling;
  return a.type == b.type && x.llama3 == y.llama3 && x.factor == y.factor && x.low_freq_factor == y.low_freq_factor &&
         x.high_freq_factor == y.high_freq_factor &&
         x.original_max_position_embeddings == y.original_max_position_embeddings && x.yarn == y.yarn &&
         x.beta_fast == y.beta_fast && x.beta_slow == y.beta_slow && x.mscale == y.mscale &&
         x.mscale_all_dim == y.mscale_all_dim && x.attention_factor == y.attention_factor && x.truncate == y.truncate;
}

// The legacy layout: rope_theta and rope_scaling at the top level (transformers 4).
Rope read_legacy_rope(const Reader& config, double max_positions, RopeTypes accept, double default_theta) {
  Rope rope;
  rope.theta = config.number_or("rope_theta", default_theta, 0.0);
  if (config.object("rope_scaling")) read_scaling(config.nested("rope_scaling"), config, max_positions, rope, accept);
  return rope;
}

}  // namespace

Rope read_rope(const Reader& config, RopeTypes accept, double default_theta) {
  const double max_positions = config.number_or(kMaxPositions.key, 0.0, -HUGE_VAL);
  if (!config.object("rope_parameters")) return read_legacy_rope(config, max_positions, accept, default_theta);
  // transformers 5: everything in one object.
  Rope rope;
  const Reader parameters = config.nested("rope_parameters");
  // Models that mix attention kinds key one rope object per layer type; none of ours does.
  for (const auto& [key, value] : config.object("rope_parameters")->items())
    if (value.is_object())
      parameters.fail(parameters.name(key.c_str()), "is a per-layer-type rope object, which pipefill does not read",
                      value);
  rope.theta = parameters.has("rope_theta") ? parameters.number("rope_theta", 0.0)
                                            : config.number_or("rope_theta", default_theta, 0.0);
  read_scaling(parameters, config, max_positions, rope, accept);
  // Both layouts in one file: transformers' precedence between them depends on which legacy
  // fields are present (5.24 takes rope_parameters' theta over a lone rope_theta, but the
  // legacy pair when rope_scaling is there too), so a contradiction is refused, not guessed.
  const Rope legacy = read_legacy_rope(config, max_positions, accept, default_theta);
  // (With rope_scaling present transformers drops rope_parameters, its theta included, and
  // takes the top-level rope_theta or its own default: a theta only rope_parameters gives is
  // a contradiction then too.)
  if ((config.has("rope_theta") || config.object("rope_scaling")) && parameters.has("rope_theta") &&
      legacy.theta != rope.theta)
    throw UserError(config.origin() + ": field \"rope_theta\" (" +
                    (config.has("rope_theta") ? shown(*config.raw("rope_theta")) : std::string("absent")) +
                    ") and field \"rope_parameters.rope_theta\" (" + shown(*parameters.raw("rope_theta")) +
                    ") disagree, and transformers' choice between them depends on its version and on the other "
                    "fields; keep one of them (rope_parameters is transformers 5's)");
  if (config.object("rope_scaling") && !same_scaling(legacy, rope))
    throw UserError(config.origin() + ": field \"rope_scaling\" (" + shown(*config.raw("rope_scaling")) +
                    ") and field \"rope_parameters\" (" + shown(*config.raw("rope_parameters")) +
                    ") describe different rope scalings, and transformers' choice between them depends on its "
                    "version and on the other fields; keep one of them (rope_parameters is transformers 5's)");
  return rope;
}

std::vector<bool> read_sparse_layers(const Reader& config, const std::string& family, int num_layers) {
  std::vector<bool> sparse(static_cast<size_t>(num_layers), true);
  if (family == "DeepseekV3ForCausalLM") {  // the other families ignore first_k_dense_replace
    const int dense = config.integer_or(kFirstDenseLayers, 0);
    for (int layer = 0; layer < std::min(dense, num_layers); ++layer) sparse[layer] = false;
  }
  if (family == "Qwen2MoeForCausalLM" || family == "Qwen3MoeForCausalLM") {
    const int step = config.integer_or(kSparseStep, 1);
    for (int layer = 0; layer < num_layers; ++layer)
      if ((layer + 1) % step != 0) sparse[layer] = false;
    if (config.has("mlp_only_layers")) {
      const nlohmann::json& list = *config.raw("mlp_only_layers");
      if (!list.is_array()) config.fail("mlp_only_layers", "must be a list of layer indices", list);
      for (const auto& entry : list) {
        if (!entry.is_number_integer() || entry.get<long long>() < 0 || entry.get<long long>() >= num_layers)
          config.fail("mlp_only_layers", "must list layer indices in [0, " + std::to_string(num_layers - 1) + "]",
                      entry);
        sparse[entry.get<size_t>()] = false;
      }
    }
  }
  return sparse;
}

}  // namespace field

}  // namespace pf::model
