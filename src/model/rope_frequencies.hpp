// Rotary embedding frequencies over config.rope_dim(), including llama3 and yarn
// rope_scaling (Hugging Face semantics): what every backend's RoPE kernel is given.
#pragma once

#include <vector>

#include "model/config.hpp"

namespace pf::model {

std::vector<double> rope_inv_freq(const ModelConfig& config);
// The factor cos and sin are multiplied by (YaRN's attention_factor; 1 otherwise).
float rope_scale(const ModelConfig& config);

}  // namespace pf::model
