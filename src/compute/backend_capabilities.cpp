// The refusals of compute/backend_capabilities.hpp's table.
#include "compute/backend_capabilities.hpp"

namespace pf::compute {

std::string refusal(BackendKind backend, Product product, const std::string& flag) {
  if (supports(backend, product)) return "";
  const std::string name = std::string("--backend ") + backend_name(backend);
  switch (product) {
    case Product::kLogits:
      return name + " computes no logits";
    case Product::kHiddenStates:
      return flag + " needs real compute: " + name + " computes no hidden states";
    case Product::kTokenScores:
      return flag + " needs real compute: " + name + " computes no log-probs";
    case Product::kKvExport:
    case Product::kKvStore:
      return flag + " needs real compute: " + name + " computes no KV cache";
    case Product::kBf16Choice:
      return flag + " sets the cpu backend's precision: " + name +
             (backend == BackendKind::kCuda ? " stores bf16 always (drop --dtype)"
                                            : " computes nothing (its times come from --cost-model)");
    case Product::kProfile:
      return "pipefill profile measures a backend that computes: use --backend cpu or cuda";
  }
  return flag + ": not supported by " + name;
}

std::string refusal_for_model(BackendKind backend, bool bf16, const model::ModelShape& shape) {
  if (backend != BackendKind::kCpu || !bf16 || !(shape.moe() || shape.mla())) return "";
  return std::string("--dtype bf16 on the cpu backend covers dense models for now; this one has ") +
         (shape.moe() ? "experts" : "latent attention (MLA)") + ": run it in f32 (the default)";
}

}  // namespace pf::compute
