// The cost side of studies: FLOP counts of dense / MoE / MLA layers, analytic stage costs,
// hardware files, and the pipeline simulator against hand-computed schedules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "cli/commands.hpp"
#include "compute/cpu/attention.hpp"
#include "errors.hpp"
#include "model/model_shape.hpp"
#include "model/presets.hpp"
#include "sched/cost_profile.hpp"
#include "sim/hardware.hpp"
#include "sim/pipeline_sim.hpp"
#include "sim/stage_costs.hpp"

using namespace pf;
using namespace pf::sim;
using model::ModelShape;
using model::shape_from_config;
using model::shape_from_json;

TEST(ModelShape, DenseCountsMatchTheConfig) {
  const auto config = model::preset_config("llama3-8b");
  const ModelShape s = shape_from_config(config);
  // Per token per layer: q, k, v, o and gate, up, down (2 FLOPs per multiply-add).
  const double per_token = 2.0 * (4096.0 * 4096 * 2 + 4096.0 * 1024 * 2 + 3.0 * 4096 * 14336);
  EXPECT_DOUBLE_EQ(s.matmul_flops(0, 1.0), per_token);
  // 3 queries at prefix 100 see 101, 102, 103 keys: 4·128 FLOPs each, 32 heads.
  EXPECT_DOUBLE_EQ(s.attention_flops(100, 3), 4.0 * 128 * 32 * (101 + 102 + 103));
  EXPECT_DOUBLE_EQ(s.attention_flops(100, 3), cpu::chunk_attention_flops(3, 100, 32, 128));
  EXPECT_NEAR(s.active_parameters() / 1e9, 8.03, 0.02);
}

TEST(ModelShape, MixtureOfExpertsAndLatentAttention) {
  const nlohmann::json qwen = {{"architectures", {"Qwen3MoeForCausalLM"}},
                               {"hidden_size", 4096},
                               {"num_hidden_layers", 94},
                               {"num_attention_heads", 64},
                               {"num_key_value_heads", 4},
                               {"head_dim", 128},
                               {"intermediate_size", 12288},
                               {"moe_intermediate_size", 1536},
                               {"num_experts", 128},
                               {"num_experts_per_tok", 8},
                               {"vocab_size", 151936},
                               {"quantization_config", {{"quant_method", "fp8"}}}};
  const ModelShape q = shape_from_json(qwen, "qwen");
  EXPECT_TRUE(q.moe());
  EXPECT_TRUE(q.fp8);
  EXPECT_NEAR(q.active_parameters() / 1e9, 22.2, 0.3);  // "A22B"
  const nlohmann::json deepseek = {{"architectures", {"DeepseekV3ForCausalLM"}},
                                   {"hidden_size", 7168},
                                   {"num_hidden_layers", 61},
                                   {"num_attention_heads", 128},
                                   {"q_lora_rank", 1536},
                                   {"kv_lora_rank", 512},
                                   {"qk_nope_head_dim", 128},
                                   {"qk_rope_head_dim", 64},
                                   {"v_head_dim", 128},
                                   {"intermediate_size", 18432},
                                   {"moe_intermediate_size", 2048},
                                   {"n_routed_experts", 256},
                                   {"n_shared_experts", 1},
                                   {"num_experts_per_tok", 8},
                                   {"first_k_dense_replace", 3},
                                   {"vocab_size", 129280}};
  const ModelShape d = shape_from_json(deepseek, "deepseek");
  EXPECT_TRUE(d.mla());
  EXPECT_EQ(d.head_dim, 192);
  EXPECT_NEAR(d.active_parameters() / 1e9, 37.5, 1.5);  // DeepSeek-V3: 37B activated
  EXPECT_GT(d.matmul_flops(0, 1), 0);
  // 8 routed + 1 shared experts of 2048 = the dense 18432 width: MoE layers differ by the router only.
  EXPECT_DOUBLE_EQ(d.matmul_flops(5, 1) - d.matmul_flops(0, 1), 2.0 * 7168 * 256);
  EXPECT_THROW(shape_from_json({{"hidden_size", 8}}, "bad"), UserError);
}

TEST(Hardware, FilesLoadAndNameTheirSources) {
  const std::vector<std::string> names = known_hardware();
  for (const char* name : {"h20", "h100", "h100-power-limited", "h200", "cpu"})
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  for (const std::string& name : names) {
    const HardwareSpec hw = load_hardware(name);
    EXPECT_GT(hw.peak_bf16_flops, 0) << name;
    EXPECT_GT(hw.inter_node.bandwidth_Bps, 0) << name;
    std::ifstream in(hw.path);
    const auto json = nlohmann::json::parse(in);
    EXPECT_FALSE(json.at("sources").empty()) << name;
  }
  try {  // a name not there lists those that are
    load_hardware("tpu9000");
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    for (const char* name : {"cpu, ", "h100, ", "h100-power-limited, ", "h20, ", "h200"})
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
}

// A key the loader does not read (a typo, or one an older version read) is refused by name.
TEST(Hardware, UnknownAndRetiredKeysAreRefused) {
  std::ifstream in(load_hardware("h20").path);
  const nlohmann::json h20 = nlohmann::json::parse(in);
  const std::string path = testing::TempDir() + "hardware_keys.json";
  auto message_for = [&](const char* key) {
    nlohmann::json edited = h20;
    edited[key] = 2;
    std::ofstream(path) << edited.dump();
    try {
      load_hardware(path);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message_for("activation_bytes").find("--wire-bytes"), std::string::npos);
  EXPECT_NE(message_for("gpus_per_nod").find("unknown key \"gpus_per_nod\""), std::string::npos);
  nlohmann::json misspelt_peak = h20;
  misspelt_peak["peak_tflops"]["fp_8"] = 296;
  std::ofstream(path) << misspelt_peak.dump();
  EXPECT_THROW(load_hardware(path), UserError);
  std::ofstream(path) << h20.dump();
  EXPECT_NO_THROW(load_hardware(path));
}

TEST(StageCosts, AnalyticModelIsThePrefixForm) {
  const ModelShape s = shape_from_config(model::preset_config("llama3-8b"));
  const HardwareSpec hw = load_hardware("h200");
  const auto costs = analytic_stage_costs(s, hw, {{0, 16}, {16, 16}}, 2, false);
  ASSERT_EQ(costs.size(), 2u);
  // t(L, x) = FLOPs / rates + the TP all-reduces, counted by hand for 16 layers of
  // Llama-3-8B (hidden 4096, 32 query and 8 KV heads of 128, MLP 14336, vocabulary 128256):
  //   projections 2 (4096·4096·2 [q, o] + 4096·1024·2 [k, v] + 3·4096·14336) = 436207616 FLOPs a token;
  //   attention 4·128 FLOPs per (query, visible key, head): 32 heads, x L + x (x + 1) / 2 keys;
  //   tp 2 shares both over 2 devices, each at the bf16 peak times its efficiency;
  //   two ring all-reduces of x·4096 float32 activations a layer, 2 (tp - 1) steps of 1/tp of them;
  //   each GEMM of x rows at x / (x + half_rows) of the rate: half_rows more rows' FLOPs.
  const double x = 4096, L = 65536, tp = 2;
  const double matmul = 16 * 436207616.0 * (x + hw.matmul_half_rows);
  const double attention = 16 * 4.0 * 128 * 32 * (x * L + x * (x + 1) / 2);
  const double steps = 2 * (tp - 1);
  const double allreduce =
      16 * 2 * (steps * hw.intra_node.latency_s + steps * (x * 4096 / tp) * 4 / hw.intra_node.bandwidth_Bps);
  const double expected = matmul / (hw.peak_bf16_flops * hw.matmul_efficiency * tp) +
                          attention / (hw.peak_bf16_flops * hw.attention_efficiency * tp) + allreduce;
  EXPECT_NEAR(costs[0].chunk_seconds(L, x), expected, 1e-9 * expected);
  // Only the last stage has the LM head: one position, 2·4096·128256 FLOPs.
  EXPECT_EQ(costs[0].lm_head_s, 0.0);
  const double lm_head = 2.0 * 4096 * 128256 / (hw.peak_bf16_flops * hw.matmul_efficiency * tp);
  EXPECT_NEAR(costs[1].lm_head_s, lm_head, 1e-12 * lm_head);
  // Stages on different nodes talk over the inter-node link.
  EXPECT_EQ(stage_link(hw, 0, 8).bandwidth_Bps, hw.inter_node.bandwidth_Bps);
  EXPECT_EQ(stage_link(hw, 0, 4).bandwidth_Bps, hw.intra_node.bandwidth_Bps);
}

namespace {

StageCost constant_cost(double seconds_per_token) {
  StageCost c;
  c.chunk.form = sched::CostForm::kPrefixAware;
  c.chunk.b = seconds_per_token;
  return c;
}

SimSetup free_links(int pp, int depth = 4) {
  SimSetup setup;
  setup.ring_depth = depth;
  setup.hidden_size = 1;
  setup.activation_bytes = 1;
  setup.links.assign(pp - 1, LinkSpec{1e30, 0.0});
  return setup;
}

}  // namespace

TEST(PipelineSim, OneStageIsSequential) {
  const auto plan = sched::make_plan({300, 100}, sched::FixedChunkPolicy(100));
  const auto result = simulate_pipeline(plan, {constant_cost(0.01)}, free_links(1));
  EXPECT_NEAR(result.ttft_s[0], 3.0, 1e-12);
  EXPECT_NEAR(result.ttft_s[1], 4.0, 1e-12);
  EXPECT_NEAR(result.makespan_s, 4.0, 1e-12);
}

// Per-token scores: the last stage runs the LM head on every row, one row's time each; without
// them on a prompt's last row only.
TEST(PipelineSim, ScoresRunTheLmHeadOnEveryRow) {
  const auto plan = sched::make_plan({300, 100}, sched::FixedChunkPolicy(100));
  StageCost cost = constant_cost(0.01);
  cost.lm_head_s = 0.001;
  SimSetup setup = free_links(1);
  const auto first_tokens = simulate_pipeline(plan, {cost}, setup);
  EXPECT_NEAR(first_tokens.ttft_s[0], 3.0 + 0.001, 1e-12);
  EXPECT_NEAR(first_tokens.makespan_s, 4.0 + 2 * 0.001, 1e-12);
  setup.scores = true;
  const auto scored = simulate_pipeline(plan, {cost}, setup);
  EXPECT_NEAR(scored.ttft_s[0], 3.0 + 0.3, 1e-12);
  EXPECT_NEAR(scored.makespan_s, 4.0 + 0.4, 1e-12);
}

TEST(PipelineSim, ACachedPrefixSkipsItsChunks) {
  // A shared 200-token prefix: the second prompt computes only its last 100 tokens.
  const auto fresh = sched::make_plan({300, 300}, sched::FixedChunkPolicy(100));
  const auto reused =
      sched::make_plan({300, 300}, sched::FixedChunkPolicy(100), {}, sched::PrefixPlan::from_outside({0, 200}));
  const auto a = simulate_pipeline(fresh, {constant_cost(0.01)}, free_links(1));
  const auto b = simulate_pipeline(reused, {constant_cost(0.01)}, free_links(1));
  EXPECT_NEAR(a.ttft_s[1], 6.0, 1e-12);
  EXPECT_NEAR(b.ttft_s[1], 4.0, 1e-12);
}

TEST(PipelineSim, EqualStagesFollowTheIdealFormula) {
  // P stages, M equal micro-batches of time t, free links: makespan (P - 1 + M) t.
  const int pp = 4, m = 10;
  const auto plan = sched::make_plan({1000}, sched::FixedChunkPolicy(100));
  const auto result = simulate_pipeline(plan, std::vector<StageCost>(pp, constant_cost(0.001)), free_links(pp));
  EXPECT_NEAR(result.makespan_s, (pp - 1 + m) * 0.1, 1e-9);
  EXPECT_NEAR(result.ttft_s[0], result.makespan_s, 1e-12);
}

TEST(PipelineSim, LinksAndTheSlowestStageSetThePace) {
  const auto plan = sched::make_plan({400}, sched::FixedChunkPolicy(100));  // 4 micro-batches
  // Stage 1 twice as slow: it sets the beat after the first chunk.
  auto result = simulate_pipeline(plan, {constant_cost(0.001), constant_cost(0.002)}, free_links(2));
  EXPECT_NEAR(result.makespan_s, 0.1 + 4 * 0.2, 1e-9);
  // A link of 1 s latency per message delays each arrival by 1 s; transfers overlap compute.
  SimSetup slow = free_links(2);
  slow.links[0] = LinkSpec{1e30, 1.0};
  result = simulate_pipeline(plan, {constant_cost(0.001), constant_cost(0.001)}, slow);
  EXPECT_NEAR(result.makespan_s, 0.1 + 1.0 + 4 * 0.1, 1e-9);
  EXPECT_NEAR(result.boundary_bytes[0], 400.0, 1e-9);  // hidden 1 x 1 byte x 400 tokens x tp 1
}

TEST(PipelineSim, AFullRingBlocksTheSender) {
  // Stage 1 is 10x slower; with ring depth 1 stage 0 can only be about two chunks ahead, so
  // it records send-commit waits; with depth 8 it runs free.
  const auto plan = sched::make_plan({1000}, sched::FixedChunkPolicy(100));
  const std::vector<StageCost> costs = {constant_cost(0.0001), constant_cost(0.001)};
  auto commits = [](const SimResult& r) {
    int n = 0;
    for (const auto& e : r.events) n += e.stage == 0 && e.kind == static_cast<int>(trace::EventKind::kSendCommit);
    return n;
  };
  const auto tight = simulate_pipeline(plan, costs, free_links(2, 1));
  const auto loose = simulate_pipeline(plan, costs, free_links(2, 8));
  EXPECT_GT(commits(tight), 5);
  EXPECT_LT(commits(loose), commits(tight));
  EXPECT_NEAR(tight.makespan_s, loose.makespan_s, 1e-9);  // the slow stage sets the end either way
}

namespace {

int simulate(std::vector<std::string> args) {
  args.insert(args.begin(), "simulate");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return cli::simulate_command(static_cast<int>(argv.size()), argv.data());
}

}  // namespace

// A CP rank's TP group all-reduces only its own share of the tokens: at cp 2 the formula
// per rank is half of cp 1's (it once counted the whole prompt, cp times too much).
TEST(SimulateCommand, TpRingFormulaCountsACpRanksShare) {
  auto ring_mib = [](const std::string& cp) {
    testing::internal::CaptureStdout();
    // (--logprobs: every row read, so cp 1's last layer is not narrowed to the rows read.)
    EXPECT_EQ(simulate({"--model-config", "synthetic:tiny", "--hardware", "h100", "--tp", "2", "--cp", cp, "--length",
                        "8192", "--chunk-size", "1024", "--logprobs"}),
              0);
    const std::string out = testing::internal::GetCapturedStdout();
    const size_t at = out.find("TP group of stage 0");
    EXPECT_NE(at, std::string::npos) << out;
    const size_t eq = out.find("= ", at);
    return std::stod(out.substr(eq + 2));
  };
  const double one = ring_mib("1"), two = ring_mib("2");
  EXPECT_GT(one, 0);
  EXPECT_NEAR(two, one / 2, one * 1e-3);
}

TEST(SimulateCommand, RunsAndRejectsBadInput) {
  testing::internal::CaptureStdout();
  EXPECT_EQ(simulate({"--model-config", "synthetic:tiny", "--hardware", "cpu", "--pp", "2", "--length", "5000",
                      "--chunk-size", "1024", "--dynamic-chunking"}),
            0);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("ttft_s: "), std::string::npos) << out;
  EXPECT_NE(out.find("PP boundary 0->1"), std::string::npos) << out;
  EXPECT_THROW(simulate({"--model-config", "synthetic:tiny", "--hardware", "nope", "--length", "5"}), UserError);
  EXPECT_THROW(simulate({"--model-config", "/missing.json", "--hardware", "cpu", "--length", "5"}), UserError);
  EXPECT_THROW(simulate({"--model-config", "synthetic:tiny", "--hardware", "cpu", "--pp", "9", "--length", "5"}),
               UserError);  // more stages than layers
  EXPECT_THROW(simulate({"--model-config", "synthetic:tiny", "--hardware", "cpu"}), UserError);  // no --length
  // --cached-tokens: once per prompt or once for all, below each length.
  testing::internal::CaptureStdout();
  EXPECT_EQ(simulate({"--model-config", "synthetic:tiny", "--hardware", "cpu", "--length", "5000", "--length", "5100",
                      "--cached-tokens", "0", "--cached-tokens", "4992"}),
            0);
  const std::string reuse = testing::internal::GetCapturedStdout();
  EXPECT_NE(reuse.find("prefix reuse: 4992 of 10100 prompt tokens cached"), std::string::npos) << reuse;
  EXPECT_THROW(simulate({"--model-config", "synthetic:tiny", "--hardware", "cpu", "--length", "50", "--length", "60",
                         "--cached-tokens", "1", "--cached-tokens", "2", "--cached-tokens", "3"}),
               UserError);
  EXPECT_THROW(
      simulate({"--model-config", "synthetic:tiny", "--hardware", "cpu", "--length", "50", "--cached-tokens", "50"}),
      UserError);
}

// Context parallelism's ring (sim/context_parallel.hpp): one rank's attention is 1/cp of the
// chunk's when the link hides every step; a slow link shows, pass-KV's steps grow with the
// prefix and pass-Q's do not, so auto turns to pass-Q deep in a prompt on a slow link.
TEST(ContextParallel, RingStepsHideBehindAttentionOrShow) {
  CpRing ring;
  ring.ranks = 4;
  ring.kv_bytes_per_token = 512;                                           // 1 KV head of 128, K and V, bf16
  ring.q_bytes_per_token = 2048;                                           // 8 query heads of 128, bf16
  ring.out_bytes_per_token = 2080;                                         // their outputs and a float log-sum-exp each
  ring.link = {1e18, 0.0};                                                 // as good as free
  EXPECT_DOUBLE_EQ(cp_layer_step(CpRing{}, 8.0, 1000, 100).seconds, 8.0);  // one rank: the attention itself
  ring.mode = CpAttention::kPassKv;
  const CpLayerStep free_kv = cp_layer_step(ring, 8.0, 1000, 100);
  EXPECT_NEAR(free_kv.seconds, 2.0, 1e-9);  // 8 / 4: each rank one quarter, every transfer hidden
  // pass-KV: each rank's shard of the 1100 tokens' KV passes the 3 others.
  EXPECT_NEAR(free_kv.bytes_sent, 3.0 * 1100 / 4 * 512, 1e-6);
  // Both hidden, the same time: auto takes the one that moves less (here pass-Q: 25 tokens'
  // queries and outputs a step against 275 tokens' KV).
  ring.mode = CpAttention::kAuto;
  const CpLayerStep free_auto = cp_layer_step(ring, 8.0, 1000, 100);
  EXPECT_EQ(free_auto.variant, CpAttention::kPassQ);
  EXPECT_NEAR(free_auto.bytes_sent, 3.0 * 25 * (2048 + 2080), 1e-6);

  ring.link = {1e9, 1e-5};  // 1 GB/s: a step of 275 tokens' KV takes 0.15 ms, of 25 tokens' Q 0.06 ms
  ring.mode = CpAttention::kPassKv;
  const double attention = 1e-4;  // small: the transfers show
  const CpLayerStep kv_short = cp_layer_step(ring, attention, 0, 100);
  const CpLayerStep kv_long = cp_layer_step(ring, attention, 100000, 100);
  EXPECT_GT(kv_long.seconds, 100 * kv_short.seconds / 2);  // the prefix's KV travels at every step
  ring.mode = CpAttention::kPassQ;
  const CpLayerStep q_short = cp_layer_step(ring, attention, 0, 100);
  const CpLayerStep q_long = cp_layer_step(ring, attention, 100000, 100);
  EXPECT_DOUBLE_EQ(q_long.seconds, q_short.seconds);  // the same queries, whatever the prefix
  ring.mode = CpAttention::kAuto;
  EXPECT_EQ(cp_layer_step(ring, attention, 100000, 100).variant, CpAttention::kPassQ);
  EXPECT_EQ(cp_layer_step(ring, attention, 0, 100).variant, CpAttention::kPassKv);
  // Meta's rule for GQA 128/8: pass-Q once the chunk is at most 1/8 of what it attends to.
  EXPECT_TRUE(meta_rule_prefers_pass_q(700, 100, 8, 128));
  EXPECT_FALSE(meta_rule_prefers_pass_q(100, 100, 8, 128));
  EXPECT_THROW(parse_cp_attention("ring"), UserError);
}

// A GEMM of m rows runs at m / (m + half_rows) of the matmul rate: a dense layer's GEMMs get
// a chunk's rows, each expert's a chunk's rows x experts_per_token / experts, so a routed
// model pays experts / experts_per_token times the dense model's half rows per chunk.
TEST(StageCosts, MixtureOfExpertsPayForSmallChunks) {
  const ModelShape dense = shape_from_config(model::preset_config("llama3-8b"));
  const ModelShape moe = shape_from_json(
      nlohmann::json::parse(std::ifstream(std::string(PIPEFILL_HARDWARE_DIR) + "/../configs/qwen3-235b-a22b-fp8.json")),
      "qwen");
  HardwareSpec hw = load_hardware("h20");
  hw.intra_node = {1e18, 0.0};
  for (const ModelShape* shape : {&dense, &moe}) {
    const std::vector<model::StageRange> layer = {{0, 1}};
    hw.matmul_half_rows = 0;
    const double plain = analytic_stage_costs(*shape, hw, layer, 4, false)[0].chunk_seconds(0, 4096);
    hw.matmul_half_rows = 128;
    const double tiled = analytic_stage_costs(*shape, hw, layer, 4, false)[0].chunk_seconds(0, 4096);
    const double rate = hw.peak_bf16_flops * hw.matmul_efficiency;
    double extra = 128 * shape->rank_matmul_flops(0, 1.0, 4) / rate;
    if (shape->moe()) {
      const double expert = 2.0 * 3 * shape->hidden_size * shape->moe_intermediate_size * shape->experts_per_token / 4;
      extra += 128 * expert * (static_cast<double>(shape->experts) / shape->experts_per_token - 1) / rate;
    }
    EXPECT_NEAR(tiled - plain, extra, 1e-9 * extra) << shape->name;
  }
}

// A stage at cp 2 on a free link computes each chunk in half the time of cp 1 (its matmuls
// on half the tokens, its attention split evenly), TP's fixed latencies aside.
TEST(ContextParallel, TwoRanksHalveAStage) {
  const ModelShape shape = shape_from_config(model::preset_config("llama3-8b"));
  HardwareSpec hw = load_hardware("h100");
  hw.inter_node = hw.intra_node = {1e18, 0.0};
  hw.matmul_half_rows = 0;  // a GEMM of fewer rows is less efficient: MixtureOfExpertsPayForSmallChunks
  const std::vector<model::StageRange> one_stage = {{0, shape.num_layers}};
  const auto whole = analytic_stage_costs(shape, hw, one_stage, 1, false);
  const auto halves = analytic_stage_costs(shape, hw, one_stage, 1, false, 4, {2, CpAttention::kAuto});
  // (Deep in the prompt auto takes pass-Q, whose partial outputs return after the ring: on the
  // free link's 1e18 B/s that costs about 1e-9 s, hence the tolerance.)
  for (const auto& [prefix, tokens] : {std::pair{0.0, 8192.0}, std::pair{65536.0, 4096.0}})
    EXPECT_NEAR(halves[0].chunk_seconds(prefix, tokens), whole[0].chunk_seconds(prefix, tokens) / 2,
                1e-8 * whole[0].chunk_seconds(prefix, tokens))
        << prefix;
  EXPECT_EQ(halves[0].cp.layers, shape.num_layers);
}

// `simulate --cp`: the layout in the header, the ring's traffic a stage, a CP run faster than
// the same GPUs as pipeline stages when the pipeline has few micro-batches; bad values refused.
TEST(SimulateCommand, ContextParallelLayouts) {
  const std::vector<std::string> common = {"--model-config", "synthetic:llama3-8b", "--hardware", "h100", "--length",
                                           "65536",          "--chunk-size",        "16384"};
  auto run = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), common.begin(), common.end());
    extra.push_back("--json");
    testing::internal::CaptureStdout();
    EXPECT_EQ(simulate(extra), 0);
    return nlohmann::json::parse(testing::internal::GetCapturedStdout());
  };
  const auto pp4 = run({"--pp", "4"});
  const auto cp4 = run({"--cp", "4"});
  EXPECT_EQ(cp4["cp"], 4);
  // 4 chunks through 4 stages: a bubble of 3/7; CP has none.
  EXPECT_LT(cp4["ttft_s"][0].get<double>(), 0.8 * pp4["ttft_s"][0].get<double>());
  testing::internal::CaptureStdout();
  EXPECT_EQ(simulate({"--model-config", "synthetic:llama3-8b", "--hardware", "h100", "--pp", "2", "--cp", "2", "--tp",
                      "2", "--length", "65536", "--cp-attention", "pass-q"}),
            0);
  const std::string text = testing::internal::GetCapturedStdout();
  EXPECT_NE(text.find("pp 2 x cp 2 x tp 2"), std::string::npos) << text;
  EXPECT_NE(text.find("CP ring, stage 1 (pass-Q, within a node)"), std::string::npos) << text;
  EXPECT_THROW(simulate({"--model-config", "synthetic:tiny", "--hardware", "cpu", "--cp", "0", "--length", "5"}),
               UserError);
  EXPECT_THROW(simulate({"--model-config", "synthetic:tiny", "--hardware", "cpu", "--cp", "2", "--cp-attention", "ring",
                         "--length", "5"}),
               UserError);
}

// `simulate --cost-model P`: a profile stands for the model, pp and partition it timed, as in
// `run`: its partition is the one simulated; another model, pp or --layer-partition is refused.
TEST(SimulateCommand, AProfileStandsForItsModelAndPartition) {
  sched::CostProfile profile;
  profile.identity = {
      {"model_config", model::to_json(model::preset_config("tiny"))}, {"pp", 2}, {"layer_partition", "6,2"}};
  profile.initial_chunk = 64;
  for (int s = 0; s < 2; ++s) {
    sched::StageCostFit fit;
    fit.stage = s;
    fit.sglang.ok = fit.prefix.ok = true;
    fit.sglang.model = {sched::CostForm::kFreshQuadratic, 1e-9, 1e-5, 1e-4, 0};
    fit.prefix.model = {sched::CostForm::kPrefixAware, 1e-9, 1e-5, 1e-4, 1e-8};
    profile.stages.push_back(fit);
  }
  const std::string path = testing::TempDir() + "/simulate_profile.json";
  sched::save_cost_profile(path, profile);
  auto with = [&](const std::string& model, const std::string& pp, std::vector<std::string> extra) {
    std::vector<std::string> args = {
        "--model-config", model, "--hardware",         "cpu",          "--pp", pp, "--length", "600",
        "--chunk-size",   "64",  "--dynamic-chunking", "--cost-model", path};
    args.insert(args.end(), extra.begin(), extra.end());
    return simulate(args);
  };
  testing::internal::CaptureStdout();
  EXPECT_EQ(with("synthetic:tiny", "2", {}), 0);
  const std::string text = testing::internal::GetCapturedStdout();
  EXPECT_NE(text.find("layers 6,2"), std::string::npos) << text;
  EXPECT_THROW(with("synthetic:small", "2", {}), UserError);                           // another model
  EXPECT_THROW(with("synthetic:tiny", "2", {"--layer-partition", "4,4"}), UserError);  // another partition
  EXPECT_THROW(with("synthetic:tiny", "4", {}), UserError);                            // another pp
}
