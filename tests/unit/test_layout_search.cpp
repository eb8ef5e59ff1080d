// `pipefill advise`'s search: the layouts it ranks are the ones `run` can run on the
// allocation, each device holds what it must, and on the source texts' own setups it ranks
// as they measured (PP4 x TP8 above TP32 for DeepSeek-V3.1 at 128K; dynamic chunking above
// fixed for Qwen3-235B at PP8; the tuned chunks where the seeds found theirs).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "errors.hpp"
#include "model/model_shape.hpp"
#include "model/presets.hpp"
#include "sim/gpu_memory.hpp"
#include "sim/hardware.hpp"
#include "sim/layout_search.hpp"
#include "sim/profile_calibration.hpp"
#include "sim/stage_costs.hpp"

using namespace pf;
using namespace pf::sim;

namespace {

std::string config_path(const char* name) {
  return std::string(PIPEFILL_HARDWARE_DIR) + "/../configs/" + name;
}

// The seeds' setting: SGLang runs FP8 checkpoints in FP8 and sends bf16 activations.
AdviseRequest seeds_request(const char* config, int nodes, int64_t length) {
  AdviseRequest r;
  r.shape = model::load_model_shape(config_path(config));
  r.hardware = load_hardware("h20");
  r.nodes = nodes;
  r.devices_per_node = 8;
  r.lengths = {length};
  r.fp8_weights = true;
  r.wire_bytes = 2;
  return r;
}

const LayoutAdvice* find(const Advice& advice, int pp, int cp, int tp) {
  for (const auto& a : advice.ranked)
    if (a.pp == pp && a.cp == cp && a.tp == tp && a.nodes * 8 == pp * cp * tp) return &a;
  return nullptr;
}

size_t rank_of(const Advice& advice, const LayoutAdvice* a) {
  return static_cast<size_t>(a - advice.ranked.data());
}

double parameters(const model::ModelShape& s) {
  double total = 2.0 * s.hidden_size * s.vocab_size;
  for (int layer = 0; layer < s.num_layers; ++layer) total += s.layer_parameters(layer);
  return total;
}

}  // namespace

TEST(GpuMemory, ParameterCountsMatchThePublishedSizes) {
  // Llama-3-8B: 8,030,261,248 parameters; Qwen3-235B-A22B: 235B; DeepSeek-V3: 671B (without
  // its multi-token-prediction layer, which pipefill does not load). Norms are left out.
  EXPECT_NEAR(parameters(model::shape_from_config(model::preset_config("llama3-8b"))) / 8.030261248e9, 1.0, 1e-3);
  EXPECT_NEAR(parameters(model::load_model_shape(config_path("qwen3-235b-a22b-fp8.json"))) / 235e9, 1.0, 0.01);
  EXPECT_NEAR(parameters(model::load_model_shape(config_path("deepseek-v3.1.json"))) / 671e9, 1.0, 0.01);
}

TEST(GpuMemory, BusiestDeviceSplitsWeightsAndKv) {
  const model::ModelShape llama = model::shape_from_config(model::preset_config("llama3-8b"));
  const auto whole = busiest_device(llama, model::default_partition(32, 1), 1, 1, 4096, 131072, false);
  EXPECT_NEAR(whole.weights / 2.0 / 8.030261248e9, 1.0, 1e-3);  // bf16
  // KV: 32 layers x 8 KV heads x 128 x (K and V) x 2 bytes = 128 KiB a token.
  EXPECT_DOUBLE_EQ(whole.kv, 131072.0 * 32 * 8 * 128 * 2 * 2);
  // pp 2 x cp 2 x tp 2: each device a quarter of the layers' weights by TP and PP, an eighth of the KV.
  const auto split = busiest_device(llama, model::default_partition(32, 2), 2, 2, 4096, 131072, false);
  EXPECT_DOUBLE_EQ(split.kv, whole.kv / 8);
  EXPECT_LT(split.weights, whole.weights / 3.5);
  EXPECT_TRUE(fits_device(whole, 80.0 * kGiB));
  EXPECT_FALSE(fits_device(busiest_device(llama, model::default_partition(32, 1), 1, 1, 4096, 1 << 20, false),
                           80.0 * kGiB));  // 128 GiB of KV at 1M tokens
}

TEST(LayoutSearch, EveryLayoutRunsOnTheAllocationAndFits) {
  const AdviseRequest request = seeds_request("qwen3-235b-a22b-fp8.json", 4, 131072);
  const Advice advice = advise_layouts(request);
  ASSERT_FALSE(advice.ranked.empty());
  double best_on_base = 0;
  for (size_t i = 0; i < advice.ranked.size(); ++i) {
    const LayoutAdvice& a = advice.ranked[i];
    SCOPED_TRACE(layout_text(a.pp, a.cp, a.tp) + " on " + std::to_string(a.nodes));
    EXPECT_EQ(a.gpus(), a.nodes * 8);
    EXPECT_TRUE(a.nodes == 1 || a.nodes == 2 || a.nodes == 4);
    EXPECT_LE(a.tp, 4);  // Qwen3-235B's 4 KV heads: `run` refuses --tp 8
    EXPECT_TRUE(8 % (a.cp * a.tp) == 0 || (a.cp * a.tp) % 8 == 0);
    EXPECT_TRUE(fits_device(a.memory, request.hardware.memory_bytes));
    if (i > 0) {
      EXPECT_LE(advice.ranked[i - 1].time_s, a.time_s);
    }
    EXPECT_LE(a.time_s, a.best_fixed_time_s);  // the dynamic step keeps C* unless it does better
    if (a.nodes == advice.base_nodes) best_on_base = std::max(best_on_base, a.efficiency);
  }
  EXPECT_DOUBLE_EQ(best_on_base, 1.0);
  // One node cannot hold pp 1 x cp 8 x tp 1: every device would hold all 235 GB of FP8 weights.
  bool refused = false;
  for (const auto& out : advice.left_out) refused = refused || out.layout == "pp 1 x cp 8 x tp 1 on 1 node";
  EXPECT_TRUE(refused);
}

TEST(LayoutSearch, RanksTheSeedsLayoutsAsTheyMeasured) {
  // DeepSeek-V3.1 at 128K on 4 nodes: PP4 x TP8 above TP32 (the seeds: +30.5 % throughput),
  // with the tuned chunks where the seeds found theirs (static 4K, dynamic 12K).
  const Advice deepseek = advise_layouts(seeds_request("deepseek-v3.1.json", 4, 131072));
  const LayoutAdvice* pp4_tp8 = find(deepseek, 4, 1, 8);
  const LayoutAdvice* tp32 = find(deepseek, 1, 1, 32);
  ASSERT_TRUE(pp4_tp8 && tp32);
  EXPECT_LT(rank_of(deepseek, pp4_tp8), rank_of(deepseek, tp32));
  EXPECT_LT(pp4_tp8->time_s * 1.3, tp32->time_s);
  EXPECT_TRUE(pp4_tp8->chunking.dynamic);
  EXPECT_GE(pp4_tp8->best_fixed_chunk, 2048);
  EXPECT_LE(pp4_tp8->best_fixed_chunk, 6144);
  EXPECT_GE(pp4_tp8->chunking.chunk, 8192);
  EXPECT_LE(pp4_tp8->chunking.chunk, 18432);

  // Qwen3-235B at 128K on 4 nodes: at PP8 x TP4 dynamic chunking beats the best fixed chunk.
  const Advice qwen = advise_layouts(seeds_request("qwen3-235b-a22b-fp8.json", 4, 131072));
  const LayoutAdvice* pp8_tp4 = find(qwen, 8, 1, 4);
  ASSERT_TRUE(pp8_tp4);
  EXPECT_TRUE(pp8_tp4->chunking.dynamic);
  EXPECT_LT(pp8_tp4->time_s, pp8_tp4->best_fixed_time_s);
}

TEST(LayoutSearch, SecondsForTheSeedsModelsAtOneMillionTokensOnEightNodes) {
  const auto t0 = std::chrono::steady_clock::now();
  const Advice advice = advise_layouts(seeds_request("deepseek-v3.1.json", 8, 1 << 20));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(advice.simulations, 100);
  EXPECT_LT(seconds, 60.0) << "a search of " << advice.simulations << " simulations";
  // At 1M the 8-GPU layouts hold too much KV for one node: the base is a larger allocation.
  EXPECT_GT(advice.base_nodes, 1);
}

TEST(LayoutSearch, NothingFitsIsAnError) {
  AdviseRequest r = seeds_request("deepseek-v3.1.json", 1, 1 << 20);
  r.fp8_weights = false;  // 1.3 TB of bf16 weights on 8 devices of 96 GB
  try {
    advise_layouts(r);
    FAIL() << "a layout was advised";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("fits this model and batch"), std::string::npos) << e.what();
  }
}

TEST(LayoutSearch, TensorParallelSizesFollowTheModelsWidths) {
  const model::ModelShape qwen = model::load_model_shape(config_path("qwen3-235b-a22b-fp8.json"));
  EXPECT_TRUE(tensor_parallel_allowed(qwen, 4));
  EXPECT_FALSE(tensor_parallel_allowed(qwen, 8));  // 4 KV heads
  const model::ModelShape deepseek = model::load_model_shape(config_path("deepseek-v3.1.json"));
  EXPECT_TRUE(tensor_parallel_allowed(deepseek, 32));  // MLA: the latent is whole on every rank
  EXPECT_FALSE(tensor_parallel_allowed(deepseek, 3));
}

// A profile made of the analytic model's own stage costs gives back the rates it was made
// from: the calibration inverts stage_costs exactly, for dense, routed and latent models.
TEST(ProfileCalibration, RecoversTheRatesAProfileWasMadeOf) {
  HardwareSpec truth = load_hardware("cpu");
  truth.matmul_efficiency = 0.7;
  truth.attention_efficiency = 0.45;
  truth.matmul_half_rows = 96;
  for (const char* config : {"llama3-8b", "qwen3-235b-a22b-fp8.json", "deepseek-v3.1.json"}) {
    SCOPED_TRACE(config);
    const bool preset = std::string(config).find(".json") == std::string::npos;
    const model::ModelShape shape =
        preset ? model::shape_from_config(model::preset_config(config)) : model::load_model_shape(config_path(config));
    const auto partition = model::default_partition(shape.num_layers, 2);
    const auto costs = analytic_stage_costs(shape, truth, partition, 1, false);
    sched::CostProfile profile;
    profile.identity = {{"pp", 2}, {"tp", 1}, {"layer_partition", model::partition_text(partition)}};
    for (int s = 0; s < 2; ++s) {
      sched::StageCostFit fit;
      fit.stage = s;
      fit.prefix.ok = true;
      fit.prefix.model = costs[s].chunk;
      profile.stages.push_back(fit);
    }
    HardwareSpec base = load_hardware("cpu");
    const HardwareSpec fitted = hardware_from_profile(base, shape, profile, "profile.json");
    EXPECT_NEAR(fitted.matmul_efficiency, 0.7, 1e-9);
    EXPECT_NEAR(fitted.attention_efficiency, 0.45, 1e-9);
    EXPECT_NEAR(fitted.matmul_half_rows, 96, 1e-6);
    // And the stage costs it implies are the profile's.
    const auto again = analytic_stage_costs(shape, fitted, partition, 1, false);
    EXPECT_NEAR(again[1].chunk_seconds(8192, 2048), costs[1].chunk_seconds(8192, 2048),
                1e-9 * costs[1].chunk_seconds(8192, 2048));
  }
  sched::CostProfile tp2;
  tp2.identity = {{"pp", 1}, {"tp", 2}};
  EXPECT_THROW(hardware_from_profile(load_hardware("cpu"), model::shape_from_config(model::preset_config("tiny")), tp2,
                                     "tp2.json"),
               UserError);
}
