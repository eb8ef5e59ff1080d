// Mixture-of-experts feed-forward on the CPU: the router picks each token's top-k experts
// (Hugging Face semantics per family), tokens are grouped by expert so that each expert
// runs two GEMMs on exactly its tokens, and the weighted results are summed per token.
// Each TP rank runs its slice of every expert's width, or its whole experts
// (model::ExpertSplit); either way the sum is a partial sum the TP group reduces.
#pragma once

#include <vector>

#include "model/config.hpp"
#include "model/weights.hpp"

namespace pf::cpu {

// Each token's chosen experts and weights: [tokens][k], best first.
struct Routing {
  int k = 0;
  std::vector<int> expert;
  std::vector<float> weight;
};

struct MoeWorkspace {
  Routing routing;
  std::vector<float> logits;                          // [tokens, experts]
  std::vector<int> slot_of;                           // token slots grouped by expert
  std::vector<int> first_slot;                        // [experts + 1] into slot_of
  std::vector<float> rows, gate_up, activation, out;  // one expert's tokens
};

// Routing of `tokens` rows of x [tokens, hidden] by the layer's router.
void route_tokens(const float* x, int tokens, int hidden, const model::LayerWeights& layer, const model::MoeConfig& moe,
                  MoeWorkspace& ws);
// The routing of one token from its router logits (exposed for tests): softmax top-k, or
// DeepSeek's sigmoid scores chosen with the correction bias among the best groups.
void choose_experts(const float* logits, const float* correction_bias, const model::MoeConfig& moe, int* expert,
                    float* weight);

// out [tokens, hidden] = sum over each token's experts of weight * expert(x), using
// ws.routing, over the experts this rank holds (layer.experts[i] is expert expert_begin + i),
// each `width` wide (a slice, or whole).
void routed_experts(const float* x, int tokens, int hidden, int width, int expert_begin,
                    const model::LayerWeights& layer, MoeWorkspace& ws, float* out);
// out += [sigmoid(x . gate) *] shared expert(x), width `width` (this rank's slice).
void shared_expert(const float* x, int tokens, int hidden, int width, const model::LayerWeights& layer,
                   MoeWorkspace& ws, float* out);

}  // namespace pf::cpu
