// The cost side of studies: FLOP counts of dense / MoE / MLA layers, analytic stage costs,
// hardware files, and the pipeline simulator against hand-computed schedules.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "cli/commands.hpp"
#include "compute/cpu/attention.hpp"
#include "errors.hpp"
#include "model/model_shape.hpp"
#include "model/presets.hpp"
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
  const nlohmann::json qwen = {{"architectures", {"Qwen3MoeForCausalLM"}}, {"hidden_size", 4096},
                               {"num_hidden_layers", 94}, {"num_attention_heads", 64}, {"num_key_value_heads", 4},
                               {"head_dim", 128}, {"intermediate_size", 12288}, {"moe_intermediate_size", 1536},
                               {"num_experts", 128}, {"num_experts_per_tok", 8}, {"vocab_size", 151936},
                               {"quantization_config", {{"quant_method", "fp8"}}}};
  const ModelShape q = shape_from_json(qwen, "qwen");
  EXPECT_TRUE(q.moe());
  EXPECT_TRUE(q.fp8);
  EXPECT_NEAR(q.active_parameters() / 1e9, 22.2, 0.3);  // "A22B"
  const nlohmann::json deepseek = {{"architectures", {"DeepseekV3ForCausalLM"}}, {"hidden_size", 7168},
                                   {"num_hidden_layers", 61}, {"num_attention_heads", 128}, {"q_lora_rank", 1536},
                                   {"kv_lora_rank", 512}, {"qk_nope_head_dim", 128}, {"qk_rope_head_dim", 64},
                                   {"v_head_dim", 128}, {"intermediate_size", 18432}, {"moe_intermediate_size", 2048},
                                   {"n_routed_experts", 256}, {"n_shared_experts", 1}, {"num_experts_per_tok", 8},
                                   {"first_k_dense_replace", 3}, {"vocab_size", 129280}};
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
  for (const char* name : {"h20", "h100", "h200", "cpu"}) {
    const HardwareSpec hw = load_hardware(name);
    EXPECT_GT(hw.peak_bf16_flops, 0) << name;
    EXPECT_GT(hw.inter_node.bandwidth_Bps, 0) << name;
    std::ifstream in(hw.path);
    const auto json = nlohmann::json::parse(in);
    EXPECT_FALSE(json.at("sources").empty()) << name;
  }
  EXPECT_THROW(load_hardware("tpu9000"), UserError);
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
  //   two ring all-reduces of x·4096 float32 activations a layer, 2 (tp - 1) steps of 1/tp of them.
  const double x = 4096, L = 65536, tp = 2;
  const double matmul = 16 * 436207616.0 * x;
  const double attention = 16 * 4.0 * 128 * 32 * (x * L + x * (x + 1) / 2);
  const double steps = 2 * (tp - 1);
  const double allreduce = 16 * 2 *
                           (steps * hw.intra_node.latency_s +
                            steps * (x * 4096 / tp) * 4 / hw.intra_node.bandwidth_Bps);
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

TEST(PipelineSim, ACachedPrefixSkipsItsChunks) {
  // A shared 200-token prefix: the second prompt computes only its last 100 tokens.
  const auto fresh = sched::make_plan({300, 300}, sched::FixedChunkPolicy(100));
  const auto reused = sched::make_plan({300, 300}, sched::FixedChunkPolicy(100), {}, sched::PrefixPlan::from_outside({0, 200}));
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
  EXPECT_THROW(simulate({"--model-config", "synthetic:tiny", "--hardware", "cpu", "--length", "50", "--cached-tokens",
                         "50"}),
               UserError);
}
