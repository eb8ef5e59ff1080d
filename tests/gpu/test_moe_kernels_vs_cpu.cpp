// The mixture-of-experts kernels against the CPU backend's MoE (src/compute/cpu/moe.cpp) on
// the same inputs: the router's choices (both router kinds, with groups, correction bias,
// renormalisation and scaling) must be the same experts with the same weights, including on
// exact ties (lower index first); the grouping by expert the same order; and the whole
// routed and shared feed-forward, the expert GEMMs done on the host between the kernels
// (cuBLASLt is not in the simulator; test_cuda_stage.cpp runs them on a GPU), within bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "compute/cpu/elementwise.hpp"
#include "compute/cpu/gemm.hpp"
#include "compute/cpu/moe.hpp"
#include "kernel_checks.hpp"
#include "model/config.hpp"
#include "model/weights.hpp"

using namespace pf;
using kernels::bf16;
using test::as_bf16;
using test::as_float;
using test::DeviceMemory;
using test::kBf16Tolerance;
using test::kNaN;
using test::random_vector;
using test::relative_error;
using test::rounded;

namespace {

struct RouterCase {
  const char* name;
  int experts, k;
  bool sigmoid_grouped;
  int groups, topk_groups;
  bool renormalize;
  double scaling;
  bool correction_bias;
  bool ties;  // values on a coarse grid: logits exact in any order, many of them equal
};

std::ostream& operator<<(std::ostream& os, const RouterCase& c) {
  return os << c.name;
}

// Multiples of 1 / steps in [-range, range]: products and their sums stay exact in float.
std::vector<float> grid_vector(size_t n, uint32_t seed, int steps, int range_steps) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(-range_steps, range_steps);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(pick(rng)) / static_cast<float>(steps);
  return v;
}

model::MoeConfig moe_of(const RouterCase& c) {
  model::MoeConfig moe;
  moe.experts = c.experts;
  moe.experts_per_token = c.k;
  moe.router = c.sigmoid_grouped ? model::Router::kSigmoidGrouped : model::Router::kSoftmax;
  moe.groups = c.groups;
  moe.topk_groups = c.topk_groups;
  moe.norm_topk_prob = c.renormalize;
  moe.routed_scaling_factor = c.scaling;
  moe.score_correction_bias = c.correction_bias;
  return moe;
}

// A chunk's normed rows (bf16 values, as the GPU holds them) and a layer's router.
struct RouterInputs {
  int tokens = 37, hidden = 64;
  std::vector<float> x;
  model::LayerWeights layer;
};

RouterInputs router_inputs(const RouterCase& c) {
  RouterInputs in;
  const size_t h = in.hidden;
  if (c.ties) {
    in.x = grid_vector(in.tokens * h, 1, 2, 2);             // {-1, -0.5, 0, 0.5, 1}
    in.layer.router = grid_vector(c.experts * h, 2, 8, 3);  // multiples of 1/8 up to 3/8
    for (size_t i = 0; i < h; ++i)
      in.layer.router[5 * h + i] = in.layer.router[2 * h + i];  // experts 2 and 5 always tie
    if (c.correction_bias) in.layer.router_bias = grid_vector(c.experts, 3, 16, 4);
  } else {
    in.x = rounded(random_vector(in.tokens * h, 4, 2.0f));
    in.layer.router = random_vector(c.experts * h, 5, 0.3f);
    if (c.correction_bias) in.layer.router_bias = random_vector(c.experts, 6, 0.2f);
  }
  return in;
}

kernels::RouterArgs router_args(const RouterCase& c, const RouterInputs& in) {
  kernels::RouterArgs a;
  a.tokens = in.tokens;
  a.hidden = in.hidden;
  a.experts = c.experts;
  a.k = c.k;
  a.sigmoid_grouped = c.sigmoid_grouped;
  a.groups = c.groups;
  a.topk_groups = c.topk_groups;
  a.renormalize = c.renormalize;
  a.scaling = static_cast<float>(c.scaling);
  return a;
}

class RouterKernel : public ::testing::TestWithParam<RouterCase> {};

// The router's experts and weights, then the grouping by expert, against cpu::route_tokens.
TEST_P(RouterKernel, ChoosesAsTheCpuBackendAndGroupsAlike) {
  REQUIRE_DEVICE();
  const RouterCase c = GetParam();
  const RouterInputs in = router_inputs(c);
  const model::MoeConfig moe = moe_of(c);
  ASSERT_TRUE(kernels::router_supports(c.experts, c.k, c.groups));
  cpu::MoeWorkspace ws;
  cpu::route_tokens(in.x.data(), in.tokens, in.hidden, in.layer, moe, ws);
  const int slots = in.tokens * c.k;

  DeviceMemory<bf16> d_x(as_bf16(in.x));
  DeviceMemory<float> d_router(in.layer.router);
  DeviceMemory<float> d_bias(c.correction_bias ? in.layer.router_bias : std::vector<float>(1, kNaN));
  DeviceMemory<int32_t> d_expert(std::vector<int32_t>(slots, -1));
  DeviceMemory<float> d_weight(std::vector<float>(slots, kNaN));
  kernels::RouterArgs a = router_args(c, in);
  a.x = d_x.get();
  a.weight = d_router.get();
  a.correction_bias = c.correction_bias ? d_bias.get() : nullptr;
  a.expert = d_expert.get();
  a.expert_weight = d_weight.get();
  kernels::route_tokens(a, nullptr);
  DeviceMemory<int32_t> d_first(std::vector<int32_t>(c.experts + 1, -1));
  DeviceMemory<int32_t> d_slot_of(std::vector<int32_t>(slots, -1)), d_row_of(std::vector<int32_t>(slots, -1));
  kernels::group_by_expert(d_expert.get(), slots, c.experts, d_first.get(), d_slot_of.get(), d_row_of.get(), nullptr);
  EXPECT_SYNCED();

  const std::vector<int32_t> experts = d_expert.read();
  EXPECT_EQ(std::vector<int>(experts.begin(), experts.end()), ws.routing.expert);
  const double weight_error = relative_error(d_weight.read(), ws.routing.weight);
  EXPECT_LE(weight_error, 1e-6);
  RecordProperty("weight_relative_error", test::scientific(weight_error));
  if (c.ties) {  // the data does tie: some token chose two experts of equal weight
    int tied_tokens = 0;
    for (int t = 0; t < in.tokens; ++t) {
      const float* w = ws.routing.weight.data() + t * c.k;
      bool tied = false;
      for (int i = 0; i < c.k; ++i)
        for (int j = i + 1; j < c.k; ++j) tied = tied || w[i] == w[j];
      tied_tokens += tied;
    }
    EXPECT_GT(tied_tokens, 0);
  }

  const std::vector<int32_t> first = d_first.read(), slot_of = d_slot_of.read(), row_of = d_row_of.read();
  EXPECT_EQ(std::vector<int>(first.begin(), first.end()), ws.first_slot);
  EXPECT_EQ(std::vector<int>(slot_of.begin(), slot_of.end()), ws.slot_of);
  for (int slot = 0; slot < slots; ++slot) ASSERT_EQ(slot_of[row_of[slot]], slot) << slot;
}

INSTANTIATE_TEST_SUITE_P(
    Routers, RouterKernel,
    ::testing::Values(RouterCase{"softmax", 8, 2, false, 1, 1, false, 1.0, false, false},
                      RouterCase{"softmax_ties", 8, 2, false, 1, 1, false, 1.0, false, true},
                      RouterCase{"softmax_renormalised_ties", 16, 4, false, 1, 1, true, 1.0, false, true},
                      RouterCase{"sigmoid_groups_bias", 16, 4, true, 4, 2, true, 2.5, true, false},
                      RouterCase{"sigmoid_groups_bias_ties", 16, 4, true, 4, 2, true, 2.5, true, true},
                      RouterCase{"sigmoid_groups_ties", 8, 2, true, 4, 2, false, 1.5, false, true},
                      RouterCase{"sigmoid_one_group_of_all", 8, 3, true, 1, 1, true, 1.0, true, false}),
    [](const ::testing::TestParamInfo<RouterCase>& info) { return std::string(info.param.name); });

// y[rows, out] = x . w^T on the host: the GEMMs the cuda backend runs with cuBLASLt.
std::vector<float> host_linear(const std::vector<float>& x, size_t x_offset, int rows, int in,
                               const std::vector<float>& w, int out) {
  std::vector<float> y(static_cast<size_t>(rows) * out);
  cpu::linear(x.data() + x_offset, rows, in, w.data(), out, y.data());
  return y;
}

// Routing, grouping, gather, SwiGLU and the weighted combine on the device, each expert's
// two GEMMs on the host in between, against cpu::routed_experts; then the gated shared
// expert's add against cpu::shared_expert.
TEST(MoeKernels, RoutedAndSharedExpertsMatchCpuBackend) {
  REQUIRE_DEVICE();
  const RouterCase c{"deepseek_like", 8, 3, true, 4, 2, true, 2.0, true, false};
  const RouterInputs in = router_inputs(c);
  const model::MoeConfig moe = moe_of(c);
  const int tokens = in.tokens, h = in.hidden, width = 24, shared_width = 40, k = c.k, slots = tokens * k;
  model::LayerWeights layer = in.layer;
  for (int e = 0; e < c.experts; ++e)
    layer.experts.push_back({rounded(random_vector(size_t(2) * width * h, 10 + e, 0.2f)),
                             rounded(random_vector(size_t(h) * width, 30 + e, 0.2f))});
  layer.shared = {rounded(random_vector(size_t(2) * shared_width * h, 50, 0.2f)),
                  rounded(random_vector(size_t(h) * shared_width, 51, 0.2f))};
  layer.shared_gate = random_vector(h, 52, 0.3f);

  cpu::MoeWorkspace ws;
  cpu::route_tokens(in.x.data(), tokens, h, layer, moe, ws);
  std::vector<float> want(size_t(tokens) * h);
  cpu::routed_experts(in.x.data(), tokens, h, width, 0, layer, ws, want.data());

  DeviceMemory<bf16> d_x(as_bf16(in.x));
  DeviceMemory<float> d_router(layer.router), d_bias(layer.router_bias);
  DeviceMemory<int32_t> d_expert(slots), d_first(c.experts + 1), d_slot_of(slots), d_row_of(slots);
  DeviceMemory<float> d_weight(slots);
  kernels::RouterArgs a = router_args(c, in);
  a.x = d_x.get();
  a.weight = d_router.get();
  a.correction_bias = d_bias.get();
  a.expert = d_expert.get();
  a.expert_weight = d_weight.get();
  kernels::route_tokens(a, nullptr);
  kernels::group_by_expert(d_expert.get(), slots, c.experts, d_first.get(), d_slot_of.get(), d_row_of.get(), nullptr);
  DeviceMemory<bf16> d_rows(as_bf16(std::vector<float>(size_t(slots) * h, kNaN)));
  kernels::gather_expert_rows(d_x.get(), h, d_slot_of.get(), slots, k, d_rows.get(), nullptr);
  EXPECT_SYNCED();

  // Each expert's gate_up on its rows (as MoeOnGpu's loop), SwiGLU on the device for all.
  const std::vector<int32_t> first = d_first.read();
  const std::vector<float> rows = as_float(d_rows.read());
  std::vector<float> gate_up(size_t(slots) * 2 * width, kNaN);
  for (int e = 0; e < c.experts; ++e) {
    const int count = first[e + 1] - first[e];
    if (count == 0) continue;
    const std::vector<float> y = host_linear(rows, size_t(first[e]) * h, count, h, layer.experts[e].gate_up, 2 * width);
    std::copy(y.begin(), y.end(), gate_up.begin() + size_t(first[e]) * 2 * width);
  }
  DeviceMemory<float> d_gate_up(gate_up);
  DeviceMemory<bf16> d_act(size_t(slots) * width);
  kernels::swiglu(d_gate_up.get(), slots, width, d_act.get(), nullptr);
  EXPECT_SYNCED();
  const std::vector<float> act = as_float(d_act.read());
  std::vector<float> expert_out(size_t(slots) * h, kNaN);
  for (int e = 0; e < c.experts; ++e) {
    const int count = first[e + 1] - first[e];
    if (count == 0) continue;
    const std::vector<float> y = host_linear(act, size_t(first[e]) * width, count, width, layer.experts[e].down, h);
    std::copy(y.begin(), y.end(), expert_out.begin() + size_t(first[e]) * h);
  }
  DeviceMemory<float> d_expert_out(expert_out), d_out(std::vector<float>(want.size(), kNaN));
  kernels::combine_experts(d_expert_out.get(), h, d_row_of.get(), d_weight.get(), tokens, k, d_out.get(), nullptr);
  EXPECT_SYNCED();
  const double routed_error = relative_error(d_out.read(), want);
  EXPECT_LE(routed_error, kBf16Tolerance);
  RecordProperty("routed_relative_error", test::scientific(routed_error));

  // Shared expert, gated (Qwen2-MoE): out += sigmoid(x . gate) * shared(x), onto the routed sum.
  std::vector<float> want_shared = want;
  cpu::shared_expert(in.x.data(), tokens, h, shared_width, layer, ws, want_shared.data());
  const std::vector<float> shared_gate_up = host_linear(in.x, 0, tokens, h, layer.shared.gate_up, 2 * shared_width);
  std::vector<float> shared_act(size_t(tokens) * shared_width);
  cpu::swiglu(shared_gate_up.data(), tokens, shared_width, shared_act.data());
  const std::vector<float> shared_out = host_linear(rounded(shared_act), 0, tokens, shared_width, layer.shared.down, h);
  DeviceMemory<float> d_shared_out(shared_out), d_gate(layer.shared_gate), d_sum(want);
  kernels::add_sigmoid_gated(d_sum.get(), d_shared_out.get(), d_x.get(), d_gate.get(), tokens, h, nullptr);
  EXPECT_SYNCED();
  std::vector<float> shared_delta = d_sum.read(), want_delta = want_shared;
  for (size_t i = 0; i < want.size(); ++i) shared_delta[i] -= want[i], want_delta[i] -= want[i];
  const double shared_error = relative_error(shared_delta, want_delta);
  EXPECT_LE(shared_error, kBf16Tolerance);
  RecordProperty("shared_relative_error", test::scientific(shared_error));
}

}  // namespace
