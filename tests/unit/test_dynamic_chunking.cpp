// Dynamic chunking: the SGLang-compatible size rule against hand-computed cases (each clamp
// hit by a case), pipefill's additions (beat of the slowest stage, no tiny tail), the
// least-squares fits on synthetic timings with known coefficients, and cost profiles.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <numeric>
#include <random>

#include "errors.hpp"
#include "pipeline/stage_profiler.hpp"
#include "sched/cost_model.hpp"
#include "sched/cost_profile.hpp"
#include "sched/dynamic_chunker.hpp"

using namespace pf;
using namespace pf::sched;

namespace {

ChunkCostModel sglang_model(double a, double b) {
  return {CostForm::kFreshQuadratic, a, b, 0, 0};
}

std::vector<int> plan(int64_t length, int c0, double s, int page, std::vector<ChunkCostModel> models,
                      bool fold_tail = false, int stages = 1) {
  return chunk_sizes(length, DynamicChunkPolicy({c0, s, page, fold_tail, stages}, std::move(models)));
}

void expect_valid(const std::vector<int>& sizes, int64_t length) {
  EXPECT_EQ(std::accumulate(sizes.begin(), sizes.end(), int64_t{0}), length);
  for (int size : sizes) EXPECT_GT(size, 0);
}

}  // namespace

// a = 1, b = 0, C0 = 1024: T = 1024^2 and x*(L) = -L + sqrt(L^2 + T).
TEST(DynamicChunking, HandComputedSequenceHitsAlignmentThenFloor) {
  const auto sizes = plan(4096, 1024, 1.0, 64, {sglang_model(1, 0)});
  // L=0: C0. L=1024: 424.2 -> 384 (align 64). L=1408: 333.0 -> 320. L=1728: 280.6 -> 256.
  // L=1984: 248.7 -> floor C0/4 = 256. From then on the floor holds.
  ASSERT_GE(sizes.size(), 5u);
  EXPECT_EQ(sizes[0], 1024);
  EXPECT_EQ(sizes[1], 384);
  EXPECT_EQ(sizes[2], 320);
  EXPECT_EQ(sizes[3], 256);
  EXPECT_EQ(sizes[4], 256);
  expect_valid(sizes, 4096);
  EXPECT_EQ(sizes.back(), 4096 - std::accumulate(sizes.begin(), sizes.end() - 1, 0));  // capped at what is left
}

TEST(DynamicChunking, SmoothFactorInterpolates) {
  // L = 1024: x* = 424.16; s = 0.5 -> 1024 + 0.5 (424.16 - 1024) = 724.1 -> 704.
  EXPECT_EQ(plan(4096, 1024, 0.5, 64, {sglang_model(1, 0)})[1], 704);
  // s = 0 gives fixed chunks (C0 a multiple of the alignment): 9 x 1024, then the 784 left.
  std::vector<int> fixed(9, 1024);
  fixed.push_back(784);
  EXPECT_EQ(plan(10000, 1024, 0.0, 64, {sglang_model(1, 0)}), fixed);
}

TEST(DynamicChunking, SmoothOneIsTheRawSolveAfterAlignment) {
  // DESIGN.md's rule by hand, a = 3e-9, b = 2e-5, C0 = 4096, s = 1, page 64:
  // T = a C0^2 + b C0 = 0.050331648 + 0.08192 = 0.132251648, and at prefix L
  // x* = (-(2aL + b) + sqrt((2aL + b)^2 + 4aT)) / (2a); floor C0/4 = 1024, align down to 64.
  //   L =   4096: 2aL + b = 4.4576e-5 -> x* = 2534.5 -> 2496
  //   L =  10000: 2aL + b = 8.0e-5    -> x* = 1561.7 -> 1536
  //   L =  50000: 2aL + b = 3.2e-4    -> x* =  411.7 -> floor 1024
  //   L = 200000: 2aL + b = 1.22e-3   -> x* =  108.4 -> floor 1024
  const DynamicChunkPolicy policy({4096, 1.0, 64, false}, {sglang_model(3e-9, 2e-5)});
  const std::vector<std::pair<int64_t, int64_t>> expected = {
      {4096, 2496}, {10000, 1536}, {50000, 1024}, {200000, 1024}};
  for (const auto& [prefix, size] : expected) EXPECT_EQ(policy.next_chunk(prefix, 1 << 30), size) << prefix;
  // s = 0.75 at L = 4096: 4096 + 0.75 (2534.5 - 4096) = 2924.9 -> 2880.
  EXPECT_EQ(DynamicChunkPolicy({4096, 0.75, 64, false}, {sglang_model(3e-9, 2e-5)}).next_chunk(4096, 1 << 30), 2880);
}

TEST(DynamicChunking, RaisedToTheAlignmentWhenBelowIt) {
  // C0 = 128, page 16: floor 32, alignment max(16, 64) = 64; a steep model asks for ~10 tokens.
  const DynamicChunkPolicy policy({128, 1.0, 16, false}, {sglang_model(1, 0)});
  EXPECT_EQ(policy.alignment(), 64);
  EXPECT_EQ(policy.next_chunk(5000, 100000), 64);
  // page size above 64 sets the alignment.
  EXPECT_EQ(DynamicChunkPolicy({4096, 1.0, 256, false}, {sglang_model(1, 0)}).next_chunk(4096, 1 << 20) % 256, 0);
}

TEST(DynamicChunking, CapAtTokensLeftAndFirstChunkIsC0) {
  const DynamicChunkPolicy policy({1024, 0.75, 64, false}, {sglang_model(1e-9, 1e-5)});
  EXPECT_EQ(policy.next_chunk(0, 5000), 1024);
  EXPECT_EQ(policy.next_chunk(0, 700), 700);
  EXPECT_EQ(policy.next_chunk(3000, 17), 17);
}

TEST(DynamicChunking, FallsBackToC0WhenTheSolveFails) {
  // Prefix form with a huge per-prefix cost: at L = 1024 no positive x meets the target.
  const ChunkCostModel model{CostForm::kPrefixAware, 1, 0, 0, 1e6};
  EXPECT_FALSE(model.solve(1024, model.target_time(1024)).has_value());
  const DynamicChunkPolicy policy({1024, 0.75, 64, false}, {model});
  EXPECT_EQ(policy.next_chunk(1024, 100000), 1024);
}

TEST(DynamicChunking, FoldTailWhenTheDrainGetsShorter) {
  // A per-chunk overhead c (launches, latencies) makes a 100-token tail cost nearly a whole
  // chunk's trip through the pipe: fold it. 4 stages: extra 4 x 100 b = 400 b < c + 100 b.
  const ChunkCostModel overhead{CostForm::kPrefixAware, 0, 1, 1000, 0};
  EXPECT_EQ(plan(4196, 1024, 0.0, 64, {overhead}, false, 4), (std::vector<int>{1024, 1024, 1024, 1024, 100}));
  EXPECT_EQ(plan(4196, 1024, 0.0, 64, {overhead}, true, 4), (std::vector<int>{1024, 1024, 1024, 1124}));
  // Attention-bound with no overhead: growing the last chunk delays every stage's last
  // step; the small tail is cheaper, so it stays.
  EXPECT_EQ(plan(4196, 1024, 0.0, 64, {sglang_model(1, 0)}, true, 4), (std::vector<int>{1024, 1024, 1024, 1024, 100}));
  // The seed's example: 16K at C0 4096, s 0.65 leaves a 192-token tail with SGLang's rule;
  // here the tail is whatever the model gives, and folding removes any below C0/4.
  const ChunkCostModel gpu_like{CostForm::kPrefixAware, 2e-8, 1.5e-5, 0.05, 0};
  const auto folded = plan(16384, 4096, 0.65, 64, {gpu_like}, true, 8);
  expect_valid(folded, 16384);
  EXPECT_GE(folded.back(), 1024);
}

TEST(DynamicChunking, SlowestStageSetsTheBeat) {
  // The slow stage has the same attention cost plus a large per-token cost: its target and
  // its solution bind; the fast stage alone would cut very different chunks.
  const ChunkCostModel fast = sglang_model(1, 0), slow = sglang_model(1, 5000);
  const auto both = plan(20000, 2048, 0.8, 64, {fast, slow});
  EXPECT_EQ(both, plan(20000, 2048, 0.8, 64, {slow}));
  EXPECT_NE(both, plan(20000, 2048, 0.8, 64, {fast}));
}

TEST(DynamicChunking, PlansAreAlwaysValid) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const int c0 = 64 << (rng() % 7);
    const double s = (rng() % 101) / 100.0;
    const int page = 8 << (rng() % 6);
    const int64_t length = 1 + rng() % 300000;
    const ChunkCostModel model{rng() % 2 ? CostForm::kFreshQuadratic : CostForm::kPrefixAware,
                               1e-10 * (1 + rng() % 100), 1e-6 * (rng() % 50), 1e-4 * (rng() % 3), 1e-8 * (rng() % 3)};
    expect_valid(plan(length, c0, s, page, {model}, rng() % 2), length);
  }
}

// ---- fits ---------------------------------------------------------------------------

TEST(CostFit, RecoversQuadraticCoefficientsFromNoisyTimings) {
  std::mt19937 rng(1);
  std::normal_distribution<double> noise(1.0, 0.02);
  const double a = 3e-9, b = 4e-5, c = 2e-3;
  std::vector<ChunkSample> samples;
  for (int n = 5120; n >= 40; n -= 160) samples.push_back({0, double(n), (a * n * n + b * n + c) * noise(rng)});
  const FitResult fit = fit_fresh_quadratic(samples);
  ASSERT_TRUE(fit.ok) << fit.problem;
  EXPECT_NEAR(fit.model.a, a, 0.15 * a);
  EXPECT_NEAR(fit.model.b, b, 0.15 * b);
  EXPECT_EQ(fit.model.c, 0.0);  // SGLang's chunk time is f(L+x) - f(L): no constant
  EXPECT_LT(mean_relative_error(fit.model, {{0, 4096, a * 4096 * 4096 + b * 4096}}), 0.05);
}

TEST(CostFit, RecoversPrefixAwareCoefficients) {
  std::mt19937 rng(2);
  std::normal_distribution<double> noise(1.0, 0.01);
  const ChunkCostModel truth{CostForm::kPrefixAware, 2e-9, 5e-5, 3e-3, 1e-7};
  std::vector<ChunkSample> samples;
  for (int prefix : {0, 8000, 16000, 24000, 32000})
    for (int tokens : {1024, 2048, 4096, 5120})
      samples.push_back({double(prefix), double(tokens), truth.chunk_time(prefix, tokens) * noise(rng)});
  const FitResult fit = fit_prefix_aware(samples);
  ASSERT_TRUE(fit.ok) << fit.problem;
  EXPECT_NEAR(fit.model.a, truth.a, 0.1 * truth.a);
  EXPECT_NEAR(fit.model.b, truth.b, 0.2 * truth.b);
  EXPECT_LT(mean_relative_error(fit.model, samples), 0.02);
}

TEST(CostFit, FailuresAndClamps) {
  std::vector<ChunkSample> few;
  for (int n = 1; n <= 7; ++n) few.push_back({0, 100.0 * n, 1e-3 * n * n});
  EXPECT_FALSE(fit_fresh_quadratic(few).ok);  // fewer than 8 points
  std::vector<ChunkSample> concave;
  for (int n = 1; n <= 12; ++n) concave.push_back({0, 100.0 * n, std::sqrt(100.0 * n)});
  const FitResult bad = fit_fresh_quadratic(concave);
  EXPECT_FALSE(bad.ok);  // a <= 0
  EXPECT_NE(bad.problem.find("not positive"), std::string::npos);
  std::vector<ChunkSample> negative_b;
  for (int n = 1; n <= 12; ++n) negative_b.push_back({0, 100.0 * n, 1e-6 * n * n * 1e4 - 1e-4 * n * 100});
  const FitResult clamped = fit_fresh_quadratic(negative_b);
  ASSERT_TRUE(clamped.ok);
  EXPECT_EQ(clamped.model.b, 0.0);
  std::vector<ChunkSample> same_length(10, ChunkSample{0, 512, 1e-3});
  EXPECT_FALSE(fit_fresh_quadratic(same_length).ok);  // rank deficient
}

// A prefix fit that misses its held-out chunks by more than 20 % is not used, and every failed
// fit says what would fix it (the same text in profile, plan and run).
TEST(CostFit, HeldOutChunksMissedByTooMuchFailTheFitWithAdvice) {
  const ChunkCostModel truth{CostForm::kPrefixAware, 2e-9, 5e-5, 3e-3, 1e-7};
  std::vector<ChunkSample> fresh, prefixed;
  for (int n = 1; n <= 12; ++n) fresh.push_back({0, 400.0 * n, truth.chunk_time(0, 400.0 * n)});
  int index = 0;
  for (int prefix : {0, 8000, 16000, 24000})
    for (int tokens : {1024, 2048, 4096, 5120}) {
      const double scale = index++ % 4 == 3 ? 1.5 : 1.0;  // the held-out quarter ran 50 % slower
      prefixed.push_back({double(prefix), double(tokens), truth.chunk_time(prefix, tokens) * scale});
    }
  const StageCostFit fit = fit_stage(0, fresh, prefixed);
  EXPECT_GT(fit.prefix_heldout_error, kMaxHeldoutError);
  EXPECT_FALSE(fit.prefix.ok);
  EXPECT_NE(fit.prefix.problem.find("misses the held-out chunks"), std::string::npos) << fit.prefix.problem;
  EXPECT_NE(fit.prefix.problem.find("--profile-points"), std::string::npos) << fit.prefix.problem;
  // The same samples, all on the model: both fits are used.
  for (auto& sample : prefixed) sample.seconds = truth.chunk_time(sample.prefix, sample.tokens);
  const StageCostFit good = fit_stage(0, fresh, prefixed);
  EXPECT_TRUE(good.prefix.ok) << good.prefix.problem;
  EXPECT_TRUE(good.sglang.ok) << good.sglang.problem;
}

TEST(CostFit, LeastSquaresSolvesAnExactSystem) {
  // y = 2 x0 - 3 x1 + 0.5
  std::vector<double> a, y;
  for (int i = 0; i < 6; ++i) {
    const double x0 = i, x1 = i * i;
    a.insert(a.end(), {x0, x1, 1.0});
    y.push_back(2 * x0 - 3 * x1 + 0.5);
  }
  const auto w = least_squares(a, 6, 3, y);
  ASSERT_TRUE(w.has_value());
  EXPECT_NEAR((*w)[0], 2, 1e-9);
  EXPECT_NEAR((*w)[1], -3, 1e-9);
  EXPECT_NEAR((*w)[2], 0.5, 1e-9);
}

TEST(CostProfile, JsonRoundTripAndIdentityCheck) {
  std::vector<ChunkSample> fresh, prefixed;
  for (int n = 1; n <= 12; ++n) fresh.push_back({0, 100.0 * n, 1e-8 * n * n * 1e4 + 1e-5 * n * 100});
  for (int p = 0; p < 4; ++p)
    for (int x = 1; x <= 4; ++x)
      prefixed.push_back({1000.0 * p, 256.0 * x, 1e-8 * (2.0 * 1000 * p * 256 * x + 65536.0 * x * x)});
  CostProfile profile;
  profile.identity = {{"pp", 2}, {"tp", 1}, {"layer_partition", "4,4"}};
  profile.initial_chunk = 1024;
  profile.stages = {fit_stage(0, fresh, prefixed), fit_stage(1, fresh, prefixed)};
  EXPECT_EQ(profile.stages[0].heldout_points, 4);
  EXPECT_EQ(profile.stages[0].prefixed_points, 12);
  EXPECT_GE(profile.stages[0].prefix_heldout_error, 0.0);
  const std::string path = testing::TempDir() + "/cost.json";
  save_cost_profile(path, profile);
  const CostProfile back = load_cost_profile(path);
  EXPECT_EQ(back.stages[0].sglang.model.a, profile.stages[0].sglang.model.a);
  EXPECT_EQ(back.stages[0].prefix.model.gamma, profile.stages[0].prefix.model.gamma);
  EXPECT_NO_THROW(check_profile_matches(back, profile.identity, path));
  EXPECT_THROW(check_profile_matches(back, {{"pp", 4}}, path), UserError);
  // --dtype is in an identity only when not f32: both directions are refused.
  CostProfile bf16 = back;
  bf16.identity["dtype"] = "bf16";
  EXPECT_THROW(check_profile_matches(bf16, profile.identity, path), UserError);
  nlohmann::json bf16_run = profile.identity;
  bf16_run["dtype"] = "bf16";
  EXPECT_THROW(check_profile_matches(back, bf16_run, path), UserError);
  EXPECT_NO_THROW(check_profile_matches(bf16, bf16_run, path));
  EXPECT_THROW(load_cost_profile(testing::TempDir() + "/missing.json"), UserError);
}

namespace {

// The UserError message of `f`, or "" when it does not throw one.
template <typename F>
std::string user_error_of(F f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

// A profile of `stages` stages whose fits are all ok, a = 1e-9, b = 1e-6, c = 1e-4, gamma = 1e-8.
nlohmann::json good_profile(int stages, int pp) {
  StageCostFit fit;
  fit.sglang = {{CostForm::kFreshQuadratic, 1e-9, 1e-6, 0, 0}, true, ""};
  fit.prefix = {{CostForm::kPrefixAware, 1e-9, 1e-6, 1e-4, 1e-8}, true, ""};
  CostProfile profile;
  profile.identity = {{"pp", pp}, {"tp", 1}};
  profile.initial_chunk = 1024;
  for (int s = 0; s < stages; ++s) {
    fit.stage = s;
    profile.stages.push_back(fit);
  }
  return to_json(profile);
}

std::string write_json(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST(CostProfile, RefusesCoefficientsNoCostModelHas) {
  nlohmann::json j = good_profile(2, 2);
  const std::string good = write_json("good.json", j.dump());
  EXPECT_NO_THROW(load_cost_profile(good));

  j["stages"][1]["prefix"]["a"] = -3e-9;
  const std::string negative = write_json("negative_a.json", j.dump());
  EXPECT_EQ(user_error_of([&] { load_cost_profile(negative); }),
            negative +
                ": stage 1's prefix fit has a = -3e-09: a cost model needs a > 0 and b, c, gamma >= 0, each at "
                "most 3600 seconds");
  j["stages"][1]["prefix"]["a"] = 1e-9;
  j["stages"][1]["prefix"]["b"] = 1e300;  // an hour a token is no machine's either
  const std::string huge = write_json("huge_b.json", j.dump());
  EXPECT_NE(user_error_of([&] { load_cost_profile(huge); }).find("has b = 1e+300"), std::string::npos);
  j["stages"][1]["prefix"]["b"] = 1e-6;

  // A failed fit's coefficients are never used: no reason to refuse the file.
  j["stages"][1]["prefix"]["ok"] = false;
  EXPECT_NO_THROW(load_cost_profile(write_json("failed_fit.json", j.dump())));

  j = good_profile(2, 2);
  j["stages"][0]["sglang"]["b"] = -1e-6;
  EXPECT_NE(user_error_of([&] {
              load_cost_profile(write_json("negative_b.json", j.dump()));
            }).find("stage 0's sglang fit has b = -1e-06"),
            std::string::npos);

  // 1e400 is no double: read as infinity, or refused by the parser; a UserError either way.
  std::string text = good_profile(2, 2).dump();
  const std::string gamma = "\"gamma\":1e-08";
  ASSERT_NE(text.find(gamma), std::string::npos);
  text.replace(text.find(gamma), gamma.size(), "\"gamma\":1e400");
  EXPECT_THROW(load_cost_profile(write_json("infinite.json", text)), UserError);

  // The same rule for plan's --coefficients.
  EXPECT_NO_THROW(check_coefficients({CostForm::kPrefixAware, 1e-9, 0, 0, 0}, "--coefficients"));
  EXPECT_THROW(check_coefficients({CostForm::kPrefixAware, 0, 1e-6, 0, 0}, "--coefficients"), UserError);
  EXPECT_THROW(check_coefficients({CostForm::kPrefixAware, 1e-9, NAN, 0, 0}, "--coefficients"), UserError);
}

TEST(CostProfile, RefusesStageCountsThatDoNotMatch) {
  // The file against itself: 3 stages measured for pp 2.
  const std::string three = write_json("three_stages.json", good_profile(3, 2).dump());
  EXPECT_EQ(user_error_of([&] { load_cost_profile(three); }),
            three + " has 3 stages but its identity says pp 2; profile again with `pipefill profile`");

  // The file against the run.
  const std::string two = write_json("two_stages.json", good_profile(2, 2).dump());
  const CostProfile profile = load_cost_profile(two);
  EXPECT_NO_THROW(check_profile_stages(profile, 2, two));
  EXPECT_EQ(user_error_of([&] { check_profile_stages(profile, 4, two); }),
            two + " has 2 stages but --pp is 4; profile again with `pipefill profile --pp 4`");
  EXPECT_NE(user_error_of([&] { check_profile_matches(profile, {{"pp", 4}}, two); }), "");
  CostProfile edited = profile;  // identity says pp 2, stages say otherwise (built in memory, not loaded)
  edited.stages.pop_back();
  EXPECT_NE(user_error_of([&] {
              check_profile_matches(edited, {{"pp", 2}}, two);
            }).find("has 1 stage but --pp is 2"),
            std::string::npos);

  // Stages 0..N-1 once each.
  nlohmann::json j = good_profile(2, 2);
  j["stages"][1]["stage"] = 0;
  EXPECT_NE(
      user_error_of([&] { load_cost_profile(write_json("twice.json", j.dump())); }).find("a second entry for stage 0"),
      std::string::npos);
  j["stages"][1]["stage"] = 5;
  EXPECT_NE(user_error_of([&] { load_cost_profile(write_json("beyond.json", j.dump())); }).find("stage 5"),
            std::string::npos);
  j = good_profile(0, 0);
  EXPECT_NE(user_error_of([&] { load_cost_profile(write_json("empty.json", j.dump())); }).find("empty"),
            std::string::npos);
}

TEST(Profiler, FreshLengthsFollowSglang) {
  const auto lengths = pipeline::fresh_prompt_lengths({4096, 128, 1 << 20, {}});
  ASSERT_EQ(lengths.size(), 128u);
  EXPECT_EQ(lengths.front(), 5120);  // 1.25 C0
  EXPECT_EQ(lengths.back(), 41);     // about C0 / 100
  EXPECT_TRUE(std::is_sorted(lengths.rbegin(), lengths.rend()));
  EXPECT_EQ(pipeline::fresh_prompt_lengths({4096, 16, 3000, {}}).front(), 3000);  // what the pool holds
}

// What each policy takes from a profile, at its defaults (what `profile` warns of and `run`
// and `plan` do): SGLang's policy stage 0's fresh-prompt fit alone, pipefill's every stage's
// prefix fit; every failing stage is named.
TEST(PolicyDefaults, EachPolicyUsesItsOwnStagesAndForm) {
  std::vector<StageCostFit> fits(3);
  for (int s = 0; s < 3; ++s) {
    fits[s].stage = s;
    fits[s].sglang = {sglang_model(1e-9, 1e-6), true, ""};
    fits[s].prefix = {{CostForm::kPrefixAware, 1e-9, 1e-6, 1e-3, 0}, true, ""};
  }
  fits[1].sglang = fits[1].prefix = {{}, false, "broken one"};
  fits[2].prefix = {{}, false, "broken two"};
  std::string problem;
  const auto sglang = make_dynamic_policy(policy_defaults(ChunkPolicyKind::kSglang, 1024, 64), fits, problem);
  EXPECT_NE(sglang, nullptr) << problem;  // stages 1 and 2 are not SGLang's
  const auto pipefill = make_dynamic_policy(policy_defaults(ChunkPolicyKind::kPipefill, 1024, 64), fits, problem);
  EXPECT_EQ(pipefill, nullptr);
  EXPECT_EQ(problem, "stage 1: broken one; stage 2: broken two");
  fits[0].sglang = {{}, false, "broken zero"};
  EXPECT_EQ(make_dynamic_policy(policy_defaults(ChunkPolicyKind::kSglang, 1024, 64), fits, problem), nullptr);
  EXPECT_EQ(problem, "stage 0: broken zero");
}
