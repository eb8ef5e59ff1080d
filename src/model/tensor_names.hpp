// Hugging Face tensor names of a decoder layer, per family: written once, read by the
// loader (weights.cpp) and the list of expected tensors (synthetic_weights.cpp).
#pragma once

#include <string>

#include "model/config.hpp"

namespace pf::model {

// A SwiGLU block: gate and up are [width, hidden], down [hidden, width].
struct SwigluNames {
  std::string gate, up, down;
};

class LayerTensorNames {
 public:
  LayerTensorNames(const ModelConfig& config, int layer);

  std::string operator()(const std::string& suffix) const { return prefix_ + suffix; }  // "input_layernorm.weight"
  SwigluNames dense_mlp() const;
  // MoE layers (the family's prefix: Mixtral's block_sparse_moe with w1/w3/w2, else mlp).
  std::string router() const;                  // [experts, hidden]
  std::string router_correction_bias() const;  // DeepSeek's e_score_correction_bias [experts]
  SwigluNames expert(int expert) const;
  SwigluNames shared_expert() const;       // Qwen2-MoE shared_expert, DeepSeek shared_experts
  std::string shared_expert_gate() const;  // Qwen2-MoE [1, hidden]

 private:
  const ModelConfig& config_;
  std::string prefix_;  // "model.layers.N."
};

}  // namespace pf::model
