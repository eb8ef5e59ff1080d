// `pipefill advise`'s search: the layouts it ranks are the ones `run` can run on the
// allocation, each device holds what it must, and on the source texts' own setups it ranks
// as they measured (PP4 x TP8 above TP32 for DeepSeek-V3.1 at 128K; dynamic chunking above
// fixed for Qwen3-235B at PP8; the tuned chunks where the seeds found theirs).
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "errors.hpp"
#include "model/model_shape.hpp"
#include "model/presets.hpp"
#include "model/weights.hpp"
#include "sched/hidden_slots.hpp"
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
  const DeviceStorage h100 = DeviceStorage::of(load_hardware("h100"), false);
  const auto whole = busiest_device(llama, model::default_partition(32, 1), 1, 1, 4096, 64, 131072, h100, 4, false);
  EXPECT_NEAR(whole.weights / 2.0 / 8.030261248e9, 1.0, 1e-3);  // bf16
  // KV: 32 layers x 8 KV heads x 128 x (K and V) x 2 bytes = 128 KiB a token.
  EXPECT_DOUBLE_EQ(whole.kv, 131072.0 * 32 * 8 * 128 * 2 * 2);
  // Workspace: the runtime's, and float32 activations of the longest chunk a plan of C0 4096
  // holds (sched::longest_chunk: 4096 + 1024 + 64); with CP, of a rank's share of it (below).
  const double per_token = 4.0 * 4096 + 4096 + 2 * 1024 + 3.0 * 14336;
  EXPECT_DOUBLE_EQ(whole.workspace, h100.runtime_bytes + 4.0 * (4096 + 1024 + 64) * per_token);
  // pp 2 x cp 2 x tp 2: each device a quarter of the layers' weights by TP and PP, about an
  // eighth of the KV (a CP rank's rows: half the prompt and at most two rows a chunk more).
  const auto split = busiest_device(llama, model::default_partition(32, 2), 2, 2, 4096, 64, 131072, h100, 4, false);
  EXPECT_GE(split.kv, whole.kv / 8);
  EXPECT_LE(split.kv, whole.kv / 8 * (1 + 2.0 * 34 / 65536));
  EXPECT_LT(split.weights, whole.weights / 3.5);
  // A CP rank's layer buffers hold its share of a chunk, as the cuda backend reserves them: at
  // cp 8 the activations shrink 8-fold while the ring's buffers grow with the prompt's rows.
  const auto cp8 = busiest_device(llama, model::default_partition(32, 1), 1, 8, 65536, 64, 65536, h100, 4, false);
  const auto cp1 = busiest_device(llama, model::default_partition(32, 1), 1, 1, 65536, 64, 65536, h100, 4, false);
  EXPECT_LT(cp8.workspace - h100.runtime_bytes, (cp1.workspace - h100.runtime_bytes) / 2);
  EXPECT_TRUE(fits_device(whole, h100));
  EXPECT_FALSE(fits_device(busiest_device(llama, model::default_partition(32, 1), 1, 1, 4096, 64, 1 << 20, h100, 4, false),
                           h100));  // 128 GiB of KV at 1M tokens
  // The cpu backend: float32 weights and cache, the node's memory shared by its ranks.
  const DeviceStorage cpu = DeviceStorage::of(load_hardware("cpu"), false);
  EXPECT_DOUBLE_EQ(cpu.weight_bytes, 4.0);
  EXPECT_DOUBLE_EQ(cpu.memory_bytes, load_hardware("cpu").memory_bytes / 2);
  EXPECT_FALSE(fits_device(busiest_device(llama, model::default_partition(32, 1), 1, 2, 4096, 64, 8192, cpu, 4, false), cpu));
}

// The hidden-state slots: as many as the stage loop holds at once (receives posted ahead,
// sends in flight), each a CP rank's rows but where the chunk's rows are gathered.
TEST(GpuMemory, HiddenSlotsAreTheStageLoopsAndHoldARanksRows) {
  EXPECT_EQ(sched::hidden_slots_held(4, true, true), 1);
  EXPECT_EQ(sched::hidden_slots_held(4, true, false), 5);
  EXPECT_EQ(sched::hidden_slots_held(4, false, true), 4);
  EXPECT_EQ(sched::hidden_slots_held(4, false, false), 8);
  EXPECT_EQ(sched::hidden_slot_rows(5184, 1, false), 5184);
  EXPECT_EQ(sched::hidden_slot_rows(5184, 2, false), 2592);
  EXPECT_EQ(sched::hidden_slot_rows(5185, 2, false), 2593);
  EXPECT_EQ(sched::hidden_slot_rows(5184, 2, true), 5184);

  // pp 4: stage 0, with the embedding, is the busiest; ring depth 4 holds 5 slots there, depth 1
  // two: three slots of the longest chunk (5,184 rows of 4,096 floats) apart.
  const model::ModelShape llama = model::shape_from_config(model::preset_config("llama3-8b"));
  const DeviceStorage h100 = DeviceStorage::of(load_hardware("h100"), false);
  const auto deep = busiest_device(llama, model::default_partition(32, 4), 1, 1, 4096, 64, 131072, h100, 4, false);
  const auto shallow = busiest_device(llama, model::default_partition(32, 4), 1, 1, 4096, 64, 131072, h100, 1, false);
  EXPECT_EQ(deep.stage, 0);
  EXPECT_DOUBLE_EQ(deep.workspace - shallow.workspace, 3 * 4.0 * 5184 * 4096);
  // With CP 2 the last stage's CP rank 0 gathers whole chunks into its slots (and then into a
  // buffer of its own), the busiest device of an even partition; stage 0's slots hold a rank's
  // half of the chunk (three more layers there make it the busiest).
  const auto gathers = busiest_device(llama, model::default_partition(32, 4), 1, 2, 4096, 64, 131072, h100, 4, true);
  const auto gathers1 = busiest_device(llama, model::default_partition(32, 4), 1, 2, 4096, 64, 131072, h100, 1, true);
  EXPECT_EQ(gathers.stage, 3);
  EXPECT_DOUBLE_EQ(gathers.workspace - gathers1.workspace, 3 * 4.0 * 5184 * 4096);
  const std::vector<model::StageRange> heavy_first = {{0, 11}, {11, 7}, {18, 7}, {25, 7}};
  const auto halves = busiest_device(llama, heavy_first, 1, 2, 4096, 64, 131072, h100, 4, false);
  const auto halves1 = busiest_device(llama, heavy_first, 1, 2, 4096, 64, 131072, h100, 1, false);
  EXPECT_EQ(halves.stage, 0);
  EXPECT_DOUBLE_EQ(halves.workspace - halves1.workspace, 3 * 4.0 * 2592 * 4096);
  // Without per-token scores that CP rank 0 gathers a prompt's last row only: its 4 slots hold
  // its half of a chunk, and its gather buffer one row.
  const std::vector<model::StageRange> heavy_last = {{0, 7}, {7, 7}, {14, 7}, {21, 11}};
  const auto scores = busiest_device(llama, heavy_last, 1, 2, 4096, 64, 131072, h100, 4, true);
  const auto last_row = busiest_device(llama, heavy_last, 1, 2, 4096, 64, 131072, h100, 4, false);
  EXPECT_EQ(scores.stage, 3);
  EXPECT_EQ(last_row.stage, 3);
  EXPECT_DOUBLE_EQ(scores.workspace - last_row.workspace, 4.0 * 4096 * (4 * (5184 - 2592) + (5184 - 1)));
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
    EXPECT_TRUE(fits_device(a.memory, DeviceStorage::of(request.hardware, request.fp8_weights)));
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
  EXPECT_TRUE(model::tensor_parallel_divides(qwen, 4));
  EXPECT_FALSE(model::tensor_parallel_divides(qwen, 8));  // 4 KV heads
  const model::ModelShape deepseek = model::load_model_shape(config_path("deepseek-v3.1.json"));
  EXPECT_TRUE(model::tensor_parallel_divides(deepseek, 32));  // MLA: the latent is whole on every rank
  EXPECT_FALSE(model::tensor_parallel_divides(deepseek, 3));
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

TEST(LayoutSearch, RefusesWhatItCannotSearchOrRun) {
  AdviseRequest r = seeds_request("deepseek-v3.1.json", 1, 131072);
  auto refuses = [](AdviseRequest request, const std::string& says) {
    try {
      advise_layouts(request);
      ADD_FAILURE() << "advised; expected: " << says;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  AdviseRequest huge = r;
  huge.nodes = 1 << 30;  // would overflow nodes x devices
  refuses(huge, "--nodes must be 1-4096");
  AdviseRequest long_prompt = r;
  long_prompt.lengths = {std::numeric_limits<int64_t>::max()};
  refuses(long_prompt, "tokens a prompt");
  AdviseRequest tiny_chunks = r;
  tiny_chunks.lengths = {1 << 20};
  tiny_chunks.fixed_chunks = {1};
  refuses(tiny_chunks, "--chunk-size 1 cuts the batch into 1048576 chunks");
  AdviseRequest odd_pages = r;
  odd_pages.page_size = 100;
  refuses(odd_pages, "needs a multiple of 64");
  AdviseRequest odd_heads = r;
  odd_heads.shape = model::shape_from_config(model::preset_config("llama3-8b"));
  odd_heads.shape.head_dim = 96;
  refuses(odd_heads, "head_dim 32, 48, 64 or 128");
  // A very long prompt is searched with chunks that cut it into at most kMaxChunks.
  AdviseRequest very_long = r;
  very_long.shape = model::shape_from_config(model::preset_config("llama3-8b"));
  very_long.hardware = load_hardware("h100");
  very_long.fp8_weights = false;
  very_long.nodes = 8;
  very_long.lengths = {int64_t{1} << 24};
  const Advice advice = advise_layouts(very_long);
  ASSERT_FALSE(advice.ranked.empty());
  for (const auto& a : advice.ranked) EXPECT_GE(a.best_fixed_chunk, (int64_t{1} << 24) / kMaxChunks);
}

TEST(Hardware, ImpossibleValuesAreRefused) {
  std::ifstream in(load_hardware("h100").path);
  const nlohmann::json h100 = nlohmann::json::parse(in);
  const std::string path = ::testing::TempDir() + "/odd_hardware.json";
  for (const auto& [pointer, value] :
       std::vector<std::pair<std::string, nlohmann::json>>{{"/intra_node/bandwidth_GBps", -1.0},
                                                           {"/inter_node/bandwidth_GBps", 0.0},
                                                           {"/inter_node/latency_us", -3.0},
                                                           {"/peak_tflops/fp8", 0.0},
                                                           {"/matmul_efficiency", 1.5},
                                                           {"/attention_efficiency", 4.9e-324},
                                                           {"/memory_GB", 0.0},
                                                           {"/gpus_per_node", 3.5}}) {
    nlohmann::json edited = h100;
    edited[nlohmann::json::json_pointer(pointer)] = value;
    std::ofstream(path) << edited.dump();
    EXPECT_THROW(load_hardware(path), UserError) << pointer;
  }
  nlohmann::json no_memory = h100;  // without it no layout could be held to the device's memory
  no_memory.erase("memory_GB");
  std::ofstream(path) << no_memory.dump();
  EXPECT_THROW(load_hardware(path), UserError);
}

// A prompt shorter than the smallest chunk tried is tried whole, and so is a long one: a
// 900-token prompt on one node was once only tried at 64-token chunks, and advised pp 2 x tp 4
// at 0.35 s where pp 1 x tp 8 unchunked takes 0.22.
TEST(AdviseSearch, TriesThePromptInOneChunk) {
  AdviseRequest r = seeds_request("qwen3-235b-a22b-fp8.json", 1, 900);
  const Advice advice = advise_layouts(r);
  ASSERT_FALSE(advice.ranked.empty());
  const LayoutAdvice& best = advice.ranked.front();
  EXPECT_EQ(best.pp, 1);
  EXPECT_EQ(best.chunking.chunk, 900);
  EXPECT_FALSE(best.chunking.dynamic);
  r.lengths = {131072};
  r.nodes = 4;
  const Advice longer = advise_layouts(r);
  const LayoutAdvice* cp8 = find(longer, 1, 8, 4);
  ASSERT_NE(cp8, nullptr);
  EXPECT_EQ(cp8->chunking.chunk, 131072);  // no bubble to fill: one chunk is best
}

// A batch is simulated in chunks no finer than kMaxBatchChunks allows (10,000 prompts of 512
// tokens once took 44 s at 64-token chunks), and a batch of more prompts than that is refused.
TEST(AdviseSearch, BoundsTheBatchsChunks) {
  AdviseRequest r = seeds_request("qwen3-235b-a22b-fp8.json", 1, 512);
  r.lengths.assign(3000, 512);
  const Advice advice = advise_layouts(r);
  ASSERT_FALSE(advice.ranked.empty());
  for (const LayoutAdvice& a : advice.ranked) EXPECT_GE(a.chunking.chunk * kMaxBatchChunks, 3000 * 512);
  r.lengths.assign(kMaxBatchChunks + 1, 512);
  EXPECT_THROW(advise_layouts(r), UserError);
}
