// Routing and expert GEMMs (see moe.hpp).
#include "compute/cpu/moe.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "compute/cpu/elementwise.hpp"
#include "compute/cpu/gemm.hpp"

namespace pf::cpu {
namespace {

// The routers' per-token buffers, kept between tokens: routing a chunk allocates nothing per
// token and layer (DeepSeek-V3 routes every token of every layer over 256 experts).
struct RouterScratch {
  std::vector<int> order, groups;
  std::vector<float> scores, choice, group_score, eligible;
};

RouterScratch& scratch() {
  thread_local RouterScratch buffers;
  return buffers;
}

// What a score ranks by: NaN (a NaN hidden state reaching the router) as the lowest, so the
// comparator below stays a strict weak ordering (std::partial_sort is undefined otherwise).
inline float rank_key(float v) {
  return std::isnan(v) ? -INFINITY : v;
}

// Indices of the k largest of values[0, n), best first; ties go to the lower index.
void top_k(const float* values, int n, int k, int* chosen) {
  std::vector<int>& order = scratch().order;
  order.resize(n);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [values](int a, int b) {
    const float x = rank_key(values[a]), y = rank_key(values[b]);
    return x > y || (x == y && a < b);
  });
  std::copy_n(order.begin(), k, chosen);
}

void softmax_top_k(const float* logits, const model::MoeConfig& moe, int* expert, float* weight) {
  const int n = moe.experts;
  std::vector<float>& probs = scratch().scores;
  probs.assign(logits, logits + n);
  const float max = *std::max_element(probs.begin(), probs.end());
  float sum = 0;
  for (float& p : probs) sum += (p = std::exp(p - max));
  for (float& p : probs) p /= sum;
  top_k(probs.data(), n, moe.experts_per_token, expert);
  for (int i = 0; i < moe.experts_per_token; ++i) weight[i] = probs[expert[i]];
}

// DeepSeek-V3: sigmoid scores; a group's score is the sum of its best two scores + bias;
// the top-k experts (by score + bias) are chosen among the topk_group best groups, and
// weighted by their plain scores.
void sigmoid_grouped_top_k(const float* logits, const float* bias, const model::MoeConfig& moe, int* expert,
                           float* weight) {
  const int n = moe.experts, per_group = n / moe.groups;
  RouterScratch& s = scratch();
  std::vector<float>&scores = s.scores, &choice = s.choice, &group_score = s.group_score, &eligible = s.eligible;
  scores.resize(n);
  choice.resize(n);
  for (int e = 0; e < n; ++e) {
    scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
    choice[e] = scores[e] + (bias ? bias[e] : 0.0f);
  }
  group_score.resize(moe.groups);
  for (int g = 0; g < moe.groups; ++g) {
    int best[2];
    top_k(choice.data() + g * per_group, per_group, 2, best);
    group_score[g] = choice[g * per_group + best[0]] + choice[g * per_group + best[1]];
  }
  s.groups.resize(moe.topk_groups);
  top_k(group_score.data(), moe.groups, moe.topk_groups, s.groups.data());
  eligible.assign(n, -INFINITY);
  for (int g : s.groups) std::copy_n(choice.begin() + g * per_group, per_group, eligible.begin() + g * per_group);
  top_k(eligible.data(), n, moe.experts_per_token, expert);
  for (int i = 0; i < moe.experts_per_token; ++i) weight[i] = scores[expert[i]];
}

}  // namespace

void choose_experts(const float* logits, const float* correction_bias, const model::MoeConfig& moe, int* expert,
                    float* weight) {
  const int k = moe.experts_per_token;
  if (moe.router == model::Router::kSigmoidGrouped)
    sigmoid_grouped_top_k(logits, correction_bias, moe, expert, weight);
  else
    softmax_top_k(logits, moe, expert, weight);
  if (moe.norm_topk_prob) {
    float sum = 0;
    for (int i = 0; i < k; ++i) sum += weight[i];
    // DeepSeek adds 1e-20 against a zero sum; softmax weights are positive.
    if (moe.router == model::Router::kSigmoidGrouped) sum += 1e-20f;
    for (int i = 0; i < k; ++i) weight[i] /= sum;
  }
  for (int i = 0; i < k; ++i) weight[i] *= static_cast<float>(moe.routed_scaling_factor);
}

void route_tokens(const float* x, int tokens, int hidden, const model::LayerWeights& layer, const model::MoeConfig& moe,
                  MoeWorkspace& ws) {
  const int n = moe.experts, k = moe.experts_per_token;
  ws.logits.resize(static_cast<size_t>(tokens) * n);
  linear(x, tokens, hidden, layer.router.data(), n, ws.logits.data());
  Routing& r = ws.routing;
  r.k = k;
  r.expert.resize(static_cast<size_t>(tokens) * k);
  r.weight.resize(static_cast<size_t>(tokens) * k);
  const float* bias = layer.router_bias.empty() ? nullptr : layer.router_bias.data();
  for (int t = 0; t < tokens; ++t)
    choose_experts(ws.logits.data() + static_cast<size_t>(t) * n, bias, moe, r.expert.data() + t * k,
                   r.weight.data() + t * k);
  // Group the (token, choice) slots by expert: a counting sort, tokens in order inside each.
  ws.first_slot.assign(n + 1, 0);
  for (int e : r.expert) ++ws.first_slot[e + 1];
  std::partial_sum(ws.first_slot.begin(), ws.first_slot.end(), ws.first_slot.begin());
  ws.slot_of.resize(r.expert.size());
  std::vector<int> next(ws.first_slot.begin(), ws.first_slot.end() - 1);
  for (int slot = 0; slot < static_cast<int>(r.expert.size()); ++slot) ws.slot_of[next[r.expert[slot]]++] = slot;
}

void routed_experts(const float* x, int tokens, int hidden, int width, int expert_begin,
                    const model::LayerWeights& layer, MoeWorkspace& ws, float* out) {
  std::fill(out, out + static_cast<size_t>(tokens) * hidden, 0.0f);
  const int k = ws.routing.k;
  for (size_t local = 0; local < layer.experts.size(); ++local) {
    const size_t e = expert_begin + local;
    const int first = ws.first_slot[e], count = ws.first_slot[e + 1] - first;
    if (count == 0) continue;
    ws.rows.resize(static_cast<size_t>(count) * hidden);
    for (int i = 0; i < count; ++i) {
      const int token = ws.slot_of[first + i] / k;
      std::copy_n(x + static_cast<size_t>(token) * hidden, hidden, ws.rows.data() + static_cast<size_t>(i) * hidden);
    }
    const model::SwigluWeights& w = layer.experts[local];
    ws.gate_up.resize(static_cast<size_t>(count) * 2 * width);
    ws.activation.resize(static_cast<size_t>(count) * width);
    ws.out.resize(static_cast<size_t>(count) * hidden);
    linear(ws.rows.data(), count, hidden, w.gate_up.data(), 2 * width, ws.gate_up.data());
    swiglu(ws.gate_up.data(), count, width, ws.activation.data());
    linear(ws.activation.data(), count, width, w.down.data(), hidden, ws.out.data());
    for (int i = 0; i < count; ++i) {
      const int slot = ws.slot_of[first + i];
      const float weight = ws.routing.weight[slot];
      float* dst = out + static_cast<size_t>(slot / k) * hidden;
      const float* src = ws.out.data() + static_cast<size_t>(i) * hidden;
      for (int c = 0; c < hidden; ++c) dst[c] += weight * src[c];
    }
  }
}

void shared_expert(const float* x, int tokens, int hidden, int width, const model::LayerWeights& layer,
                   MoeWorkspace& ws, float* out) {
  ws.gate_up.resize(static_cast<size_t>(tokens) * 2 * width);
  ws.activation.resize(static_cast<size_t>(tokens) * width);
  ws.out.resize(static_cast<size_t>(tokens) * hidden);
  linear(x, tokens, hidden, layer.shared.gate_up.data(), 2 * width, ws.gate_up.data());
  swiglu(ws.gate_up.data(), tokens, width, ws.activation.data());
  linear(ws.activation.data(), tokens, width, layer.shared.down.data(), hidden, ws.out.data());
  std::vector<float> gate(tokens, 1.0f);
  if (!layer.shared_gate.empty()) {  // Qwen2-MoE: sigmoid(x . w) per token
    linear(x, tokens, hidden, layer.shared_gate.data(), 1, gate.data());
    for (float& g : gate) g = 1.0f / (1.0f + std::exp(-g));
  }
  for (int t = 0; t < tokens; ++t) {
    float* dst = out + static_cast<size_t>(t) * hidden;
    const float* src = ws.out.data() + static_cast<size_t>(t) * hidden;
    for (int c = 0; c < hidden; ++c) dst[c] += gate[t] * src[c];
  }
}

}  // namespace pf::cpu
