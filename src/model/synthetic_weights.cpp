// Seeded synthetic weights and the list of tensors a model of each family has.
// Values are a counter-based hash of (seed, name, element index): reproducible, and any
// slice can be generated without generating the rest.
#include <cmath>
#include <map>

#include "errors.hpp"
#include "io/fnv1a.hpp"
#include "model/splitmix64.hpp"
#include "model/tensor_names.hpp"
#include "model/tensor_source.hpp"

namespace pf::model {

namespace {

void add_swiglu(std::vector<TensorSpec>& specs, const SwigluNames& names, int64_t width, int64_t h) {
  specs.push_back({names.gate, {width, h}});
  specs.push_back({names.up, {width, h}});
  specs.push_back({names.down, {h, width}});
}

// Multi-head latent attention's projections (DeepSeek).
void add_latent_attention(std::vector<TensorSpec>& specs, const ModelConfig& c, const LayerTensorNames& n) {
  const int64_t h = c.hidden_size, heads = c.num_heads;
  const MlaConfig& m = c.mla;
  if (m.q_lora_rank > 0) {
    specs.push_back({n("self_attn.q_a_proj.weight"), {m.q_lora_rank, h}});
    specs.push_back({n("self_attn.q_a_layernorm.weight"), {m.q_lora_rank}});
    specs.push_back({n("self_attn.q_b_proj.weight"), {heads * c.head_dim, m.q_lora_rank}});
  } else {
    specs.push_back({n("self_attn.q_proj.weight"), {heads * c.head_dim, h}});
  }
  specs.push_back({n("self_attn.kv_a_proj_with_mqa.weight"), {m.latent_width(), h}});
  specs.push_back({n("self_attn.kv_a_layernorm.weight"), {m.kv_lora_rank}});
  specs.push_back({n("self_attn.kv_b_proj.weight"), {heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank}});
  specs.push_back({n("self_attn.o_proj.weight"), {h, heads * m.v_head_dim}});
}

void add_attention(std::vector<TensorSpec>& specs, const ModelConfig& c, const LayerTensorNames& n) {
  const int64_t h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim();
  specs.push_back({n("self_attn.q_proj.weight"), {q, h}});
  specs.push_back({n("self_attn.k_proj.weight"), {kv, h}});
  specs.push_back({n("self_attn.v_proj.weight"), {kv, h}});
  if (c.attention_bias) {
    specs.push_back({n("self_attn.q_proj.bias"), {q}});
    specs.push_back({n("self_attn.k_proj.bias"), {kv}});
    specs.push_back({n("self_attn.v_proj.bias"), {kv}});
  }
  if (c.qk_norm) {
    specs.push_back({n("self_attn.q_norm.weight"), {c.head_dim}});
    specs.push_back({n("self_attn.k_norm.weight"), {c.head_dim}});
  }
  specs.push_back({n("self_attn.o_proj.weight"), {h, q}});
}

void add_experts(std::vector<TensorSpec>& specs, const ModelConfig& c, const LayerTensorNames& n) {
  const int64_t h = c.hidden_size;
  const MoeConfig& m = c.moe;
  specs.push_back({n.router(), {m.experts, h}});
  if (m.score_correction_bias) specs.push_back({n.router_correction_bias(), {m.experts}});
  for (int e = 0; e < m.experts; ++e) add_swiglu(specs, n.expert(e), m.intermediate, h);
  if (m.shared_intermediate > 0) add_swiglu(specs, n.shared_expert(), m.shared_intermediate, h);
  if (m.shared_expert_gate) specs.push_back({n.shared_expert_gate(), {1, h}});
}

}  // namespace

std::vector<TensorSpec> expected_tensors(const ModelConfig& c) {
  const int64_t h = c.hidden_size;
  std::vector<TensorSpec> specs;
  specs.push_back({"model.embed_tokens.weight", {c.vocab_size, h}});
  for (int i = 0; i < c.num_layers; ++i) {
    const LayerTensorNames n(c, i);
    specs.push_back({n("input_layernorm.weight"), {h}});
    if (c.is_mla())
      add_latent_attention(specs, c, n);
    else
      add_attention(specs, c, n);
    specs.push_back({n("post_attention_layernorm.weight"), {h}});
    if (c.moe_layer(i))
      add_experts(specs, c, n);
    else
      add_swiglu(specs, n.dense_mlp(), c.intermediate_size, h);
  }
  specs.push_back({"model.norm.weight", {h}});
  if (!c.tie_word_embeddings) specs.push_back({"lm_head.weight", {c.vocab_size, h}});
  return specs;
}

namespace {

uint64_t fnv1a(const std::string& text) { return io::Fnv1a().add(text).value; }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

class SyntheticSource final : public TensorSource {
 public:
  SyntheticSource(const ModelConfig& config, uint64_t seed) : seed_(seed) {
    for (auto& spec : expected_tensors(config)) shapes_[spec.name] = spec.shape;
  }
  bool has(const std::string& name) const override { return shapes_.count(name) != 0; }
  std::vector<std::string> names() const override {
    std::vector<std::string> all;
    for (const auto& [name, shape] : shapes_) all.push_back(name);
    return all;
  }
  std::vector<int64_t> shape(const std::string& name) const override {
    auto it = shapes_.find(name);
    if (it == shapes_.end()) throw UserError("synthetic model has no tensor " + name);
    return it->second;
  }
  void read_block(const std::string& name, int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                  float* out) const override {
    const auto s = shape(name);
    const int64_t width = s.size() >= 2 ? s[1] : 1;
    const int64_t fan_in = s.size() >= 2 ? s[1] : 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        out[r * cols + c] = synthetic_value(seed_, name, fan_in, (row0 + r) * width + (col0 + c));
  }
  uint64_t fingerprint(const std::string& name) const override {
    uint64_t hash = splitmix64(seed_ ^ fnv1a(name));
    for (int64_t d : shape(name)) hash = splitmix64(hash + static_cast<uint64_t>(d));
    return hash;
  }

 private:
  uint64_t seed_;
  std::map<std::string, std::vector<int64_t>> shapes_;
};

}  // namespace

float synthetic_value(uint64_t seed, const std::string& name, int64_t fan_in, int64_t index) {
  const uint64_t bits = splitmix64(splitmix64(seed ^ fnv1a(name)) + static_cast<uint64_t>(index));
  const float uniform = static_cast<float>(bits >> 40) * (2.0f / 16777216.0f) - 1.0f;  // [-1, 1)
  if (ends_with(name, "norm.weight")) return 1.0f + 0.1f * uniform;                    // norm gains near 1
  if (ends_with(name, ".bias") || ends_with(name, "e_score_correction_bias")) return 0.1f * uniform;
  if (name == "model.embed_tokens.weight") return uniform;
  // Linear layers: variance 1/fan_in keeps activations O(1) through the stack.
  return uniform * std::sqrt(3.0f / static_cast<float>(fan_in));
}

std::unique_ptr<TensorSource> make_synthetic_source(const ModelConfig& config, uint64_t seed) {
  return std::make_unique<SyntheticSource>(config, seed);
}

}  // namespace pf::model
