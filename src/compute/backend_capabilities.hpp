// What each backend can do for a run, declared once (ggml's supports_op, at the level of a
// run). The option parser asks it for everything the flags alone decide, the set-up for what
// depends on the model (check_backend_supports_model), so every request a backend cannot
// serve is an `error:` before any weight is read, and no StageCompute method that a backend
// leaves unimplemented (they throw std::logic_error) is reachable from a command line
// (tests/unit/test_backend_capabilities.cpp enumerates every pair).
#pragma once

#include <string>

#include "compute/backend_kind.hpp"
#include "model/model_shape.hpp"

namespace pf::compute {

// The products and precisions a run can ask for beyond the chunked forward itself.
enum class Product {
  kLogits,        // the last position's logits (every run of a backend that computes)
  kHiddenStates,  // --hidden-states
  kTokenScores,   // --logprobs, --top-k
  kKvExport,      // --save-kv
  kKvStore,       // --kv-store
  kBf16Choice,    // --dtype bf16 (a precision the backend offers beside its own)
  kProfile,       // `pipefill profile`: timing its own layers
};
inline constexpr Product kProducts[] = {Product::kLogits,   Product::kHiddenStates, Product::kTokenScores,
                                        Product::kKvExport, Product::kKvStore,      Product::kBf16Choice,
                                        Product::kProfile};

// The table: the cpu and cuda backends compute everything; cuda's precision is bf16 always
// (no --dtype to choose); the emulator computes nothing.
constexpr bool supports(BackendKind backend, Product product) {
  switch (backend) {
    case BackendKind::kCpu:
      return true;
    case BackendKind::kCuda:
      return product != Product::kBf16Choice;
    case BackendKind::kEmulate:
      return false;
  }
  return false;
}

// Why `backend` refuses `product` asked for by `flag`, the text of the `error:` line (empty
// when it does not refuse).
std::string refusal(BackendKind backend, Product product, const std::string& flag);

// The model-dependent part, asked at set-up on every rank: empty, or why not. The cpu
// backend's --dtype bf16 covers dense models with grouped-query attention.
std::string refusal_for_model(BackendKind backend, bool bf16, const model::ModelShape& shape);

}  // namespace pf::compute
