// Tensor names per family (see tensor_names.hpp).
#include "model/tensor_names.hpp"

namespace pf::model {
namespace {

SwigluNames swiglu(const std::string& p) {
  return {p + "gate_proj.weight", p + "up_proj.weight", p + "down_proj.weight"};
}

}  // namespace

LayerTensorNames::LayerTensorNames(const ModelConfig& config, int layer)
    : config_(config), prefix_("model.layers." + std::to_string(layer) + ".") {}

SwigluNames LayerTensorNames::dense_mlp() const {
  return swiglu(prefix_ + "mlp.");
}

std::string LayerTensorNames::router() const {
  return prefix_ +
         (config_.architecture == Architecture::kMixtral ? "block_sparse_moe.gate.weight" : "mlp.gate.weight");
}

std::string LayerTensorNames::router_correction_bias() const {
  return prefix_ + "mlp.gate.e_score_correction_bias";
}

SwigluNames LayerTensorNames::expert(int expert) const {
  const std::string e = std::to_string(expert);
  if (config_.architecture == Architecture::kMixtral) {  // w1 gate, w3 up, w2 down
    const std::string p = prefix_ + "block_sparse_moe.experts." + e + ".";
    return {p + "w1.weight", p + "w3.weight", p + "w2.weight"};
  }
  return swiglu(prefix_ + "mlp.experts." + e + ".");
}

SwigluNames LayerTensorNames::shared_expert() const {
  return swiglu(prefix_ +
                (config_.architecture == Architecture::kDeepseekV3 ? "mlp.shared_experts." : "mlp.shared_expert."));
}

std::string LayerTensorNames::shared_expert_gate() const {
  return prefix_ + "mlp.shared_expert_gate.weight";
}

}  // namespace pf::model
