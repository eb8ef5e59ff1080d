// The mixture-of-experts router: each token's top-k experts and their weights, from its
// normed row and the float32 router weights, by the rules of cpu::choose_experts (softmax
// top-k, or DeepSeek-V3's sigmoid scores chosen with a correction bias among the best
// groups; renormalisation; routed scaling).
//
// A block of 4 warps routes 4 tokens. The logits come first: each warp takes experts in
// turn and forms the dot products of all 4 tokens with that expert's router row, so a row
// is read once per 4 tokens. Then lane 0 of warp w picks token w's experts serially, in
// the cpu backend's order of operations: the choice is a handful of comparisons over at
// most a few hundred experts, and doing it in one thread keeps the tie rule (the lower
// index wins) and the sums' order exactly the cpu's.
#include <cmath>

#include "common.cuh"
#include "kernels.hpp"

namespace pf::kernels {
namespace {

constexpr int kTokensPerBlock = 4;
constexpr int kWarps = 4;
constexpr size_t kMaxSharedBytes = 48 * 1024;  // without opting in to more

// Per token in shared memory: logits (then probabilities or scores), the choice values,
// group scores, chosen groups, chosen experts.
struct TokenScratch {
  float* score;
  float* choice;
  float* group_score;
  int* chosen_groups;
  int* chosen;
};

// Words of one token's scratch (the chosen groups fit in `groups` words: topk_groups <= groups).
__host__ __device__ inline int scratch_words(int experts, int k, int groups) { return 2 * experts + 2 * groups + k; }

__device__ TokenScratch scratch_of(float* base, int experts, int groups) {
  TokenScratch s;
  s.score = base;
  s.choice = base + experts;
  s.group_score = base + 2 * experts;
  s.chosen_groups = reinterpret_cast<int*>(base + 2 * experts + groups);
  s.chosen = reinterpret_cast<int*>(base + 2 * experts + 2 * groups);
  return s;
}

// NaN ranks lowest, as in the cpu's top_k (a NaN hidden state must not win a slot).
__device__ inline float rank_key(float v) { return v != v ? -INFINITY : v; }  // v != v: NaN, in both builds

// Indices of the k largest of v[0, n), best first; ties to the lower index (cpu's top_k).
__device__ void top_k_serial(const float* v, int n, int k, int* chosen) {
  for (int i = 0; i < k; ++i) {
    int best = -1;
    for (int j = 0; j < n; ++j) {
      bool taken = false;
      for (int c = 0; c < i; ++c) taken = taken || chosen[c] == j;
      if (!taken && (best < 0 || rank_key(v[j]) > rank_key(v[best]))) best = j;
    }
    chosen[i] = best;
  }
}

__device__ void softmax_top_k(const RouterArgs& a, TokenScratch s, float* weight) {
  float max = s.score[0];
  for (int e = 1; e < a.experts; ++e) max = fmaxf(max, s.score[e]);
  float sum = 0.0f;
  for (int e = 0; e < a.experts; ++e) sum += (s.score[e] = expf(s.score[e] - max));
  for (int e = 0; e < a.experts; ++e) s.score[e] /= sum;
  top_k_serial(s.score, a.experts, a.k, s.chosen);
  for (int i = 0; i < a.k; ++i) weight[i] = s.score[s.chosen[i]];
}

__device__ void sigmoid_grouped_top_k(const RouterArgs& a, TokenScratch s, float* weight) {
  const int per_group = a.experts / a.groups;
  for (int e = 0; e < a.experts; ++e) {
    s.score[e] = 1.0f / (1.0f + expf(-s.score[e]));
    s.choice[e] = s.score[e] + (a.correction_bias ? a.correction_bias[e] : 0.0f);
  }
  for (int g = 0; g < a.groups; ++g) {
    int best[2];
    top_k_serial(s.choice + g * per_group, per_group, 2, best);
    s.group_score[g] = s.choice[g * per_group + best[0]] + s.choice[g * per_group + best[1]];
  }
  top_k_serial(s.group_score, a.groups, a.topk_groups, s.chosen_groups);
  // Experts outside the chosen groups are not eligible.
  for (int g = 0; g < a.groups; ++g) {
    bool chosen = false;
    for (int i = 0; i < a.topk_groups; ++i) chosen = chosen || s.chosen_groups[i] == g;
    if (!chosen)
      for (int e = g * per_group; e < (g + 1) * per_group; ++e) s.choice[e] = -INFINITY;
  }
  top_k_serial(s.choice, a.experts, a.k, s.chosen);
  for (int i = 0; i < a.k; ++i) weight[i] = s.score[s.chosen[i]];
}

__global__ void __launch_bounds__(kWarps * 32) route_tokens_kernel(RouterArgs a) {
  PF_DYNAMIC_SHARED(float, smem);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int token0 = blockIdx.x * kTokensPerBlock;
  const int tokens = min(kTokensPerBlock, a.tokens - token0);
  const int words = scratch_words(a.experts, a.k, a.groups);

  // Logits: one warp per expert at a time, all of the block's tokens against its row.
  for (int e = warp; e < a.experts; e += kWarps) {
    const float* w = a.weight + static_cast<int64_t>(e) * a.hidden;
    float part[kTokensPerBlock] = {};
    for (int c = lane; c < a.hidden; c += 32) {
      const float wc = w[c];
#pragma unroll
      for (int t = 0; t < kTokensPerBlock; ++t)
        if (t < tokens) part[t] += __bfloat162float(a.x[static_cast<int64_t>(token0 + t) * a.hidden + c]) * wc;
    }
#pragma unroll
    for (int t = 0; t < kTokensPerBlock; ++t) {
      const float logit = detail::warp_sum(part[t]);  // every lane calls it: the shuffle needs the whole warp
      if (lane == 0 && t < tokens) smem[t * words + e] = logit;
    }
  }
  __syncthreads();

  if (lane != 0 || warp >= tokens) return;
  const int token = token0 + warp;
  TokenScratch s = scratch_of(smem + warp * words, a.experts, a.groups);
  float* weight = a.expert_weight + static_cast<int64_t>(token) * a.k;
  if (a.sigmoid_grouped)
    sigmoid_grouped_top_k(a, s, weight);
  else
    softmax_top_k(a, s, weight);
  if (a.renormalize) {
    float sum = 0.0f;
    for (int i = 0; i < a.k; ++i) sum += weight[i];
    if (a.sigmoid_grouped) sum += 1e-20f;  // DeepSeek's guard against a zero sum
    for (int i = 0; i < a.k; ++i) weight[i] /= sum;
  }
  for (int i = 0; i < a.k; ++i) {
    weight[i] *= a.scaling;
    a.expert[static_cast<int64_t>(token) * a.k + i] = s.chosen[i];
  }
}

size_t shared_bytes(int experts, int k, int groups) {
  return sizeof(float) * kTokensPerBlock * static_cast<size_t>(scratch_words(experts, k, groups));
}

}  // namespace

bool router_supports(int experts, int k, int groups) {
  return experts >= 1 && k >= 1 && k <= experts && groups >= 1 && experts % groups == 0 &&
         shared_bytes(experts, k, groups) <= kMaxSharedBytes;
}

void route_tokens(const RouterArgs& args, cudaStream_t stream) {
  if (args.tokens <= 0) return;
  const size_t smem = shared_bytes(args.experts, args.k, args.groups);
  PF_LAUNCH(route_tokens_kernel, detail::blocks_for(args.tokens, kTokensPerBlock), kWarps * 32, smem, stream, args);
}

}  // namespace pf::kernels
