// Resolving --model: a checkpoint directory or synthetic:PRESET, to a config and a tensor source.
#pragma once

#include <memory>
#include <string>

#include "model/config.hpp"
#include "model/tensor_source.hpp"

namespace pf::model {

struct ModelSource {
  ModelConfig config;
  std::unique_ptr<TensorSource> tensors;
  bool synthetic = false;
};

// Opens config.json (or the preset) and the weight index; reads no tensor data.
ModelSource open_model(const std::string& model_flag, uint64_t seed);

}  // namespace pf::model
