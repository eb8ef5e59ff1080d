// Mixture of experts and multi-head latent attention, below the transformers comparison
// (tests/reference/moe_check.py): each family's config.json read as transformers writes it
// and written back, the routers on hand-made logits, the TP error that names the sizes a
// model allows, and the FLOPs the cpu backend really runs against the analytic cost model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "compute/cpu/cpu_stage_compute.hpp"
#include "compute/cpu/gemm.hpp"
#include "compute/cpu/moe.hpp"
#include "errors.hpp"
#include "kvcache/paged_kv_pool.hpp"
#include "model/config.hpp"
#include "model/model_shape.hpp"
#include "model/tensor_source.hpp"
#include "model/weights.hpp"
#include "trace/expert_load.hpp"

using namespace pf;
using nlohmann::json;

namespace {

json with(json j, const json& changes) {
  j.update(changes, true);
  return j;
}

json base(const char* architecture) {
  return {{"architectures", {architecture}}, {"hidden_size", 64},        {"num_hidden_layers", 4},
          {"num_attention_heads", 4},        {"num_key_value_heads", 2}, {"vocab_size", 97},
          {"intermediate_size", 96},         {"num_experts_per_tok", 2}, {"hidden_act", "silu"}};
}

json qwen3_moe() {
  json j = base("Qwen3MoeForCausalLM");
  j.update({{"num_experts", 8},
            {"moe_intermediate_size", 32},
            {"norm_topk_prob", true},
            {"head_dim", 16},
            {"mlp_only_layers", {1}},
            {"decoder_sparse_step", 1}});
  return j;
}

json qwen2_moe() {
  json j = base("Qwen2MoeForCausalLM");
  j.update({{"num_experts", 8},
            {"moe_intermediate_size", 32},
            {"shared_expert_intermediate_size", 48},
            {"decoder_sparse_step", 2},
            {"qkv_bias", true}});
  return j;
}

json mixtral() {
  json j = base("MixtralForCausalLM");
  j.update({{"num_local_experts", 8}, {"intermediate_size", 32}, {"sliding_window", nullptr}});
  return j;
}

json deepseek_v3() {
  json j = base("DeepseekV3ForCausalLM");
  j.update({{"n_routed_experts", 8},
            {"moe_intermediate_size", 32},
            {"n_shared_experts", 1},
            {"first_k_dense_replace", 1},
            {"n_group", 4},
            {"topk_group", 2},
            {"routed_scaling_factor", 2.5},
            {"q_lora_rank", 32},
            {"kv_lora_rank", 16},
            {"qk_nope_head_dim", 16},
            {"qk_rope_head_dim", 8},
            {"v_head_dim", 16},
            {"num_key_value_heads", 4},
            {"rope_scaling",
             {{"type", "yarn"},
              {"factor", 40.0},
              {"original_max_position_embeddings", 4096},
              {"beta_fast", 32},
              {"beta_slow", 1},
              {"mscale", 1.0},
              {"mscale_all_dim", 1.0}}}});
  return j;
}

std::vector<bool> sparse_of(const model::ModelConfig& c) {
  return c.moe.sparse_layer;
}

class NoReduce final : public dist::TpAllReduce {
 public:
  NoReduce() : TpAllReduce(false) {}

 private:
  void reduce(float*, int) override {}
};

}  // namespace

TEST(MoeConfig, EachFamilyReadsAsTransformersDefinesIt) {
  const model::ModelConfig q3 = model::parse_config(qwen3_moe(), "q3");
  EXPECT_EQ(q3.moe.experts, 8);
  EXPECT_EQ(q3.moe.intermediate, 32);
  EXPECT_TRUE(q3.moe.norm_topk_prob);
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_EQ(sparse_of(q3), (std::vector<bool>{true, false, true, true}));  // mlp_only_layers [1]

  const model::ModelConfig q2 = model::parse_config(qwen2_moe(), "q2");
  EXPECT_EQ(sparse_of(q2), (std::vector<bool>{false, true, false, true}));  // every second layer
  EXPECT_TRUE(q2.moe.shared_expert_gate);
  EXPECT_EQ(q2.moe.shared_intermediate, 48);
  EXPECT_TRUE(q2.attention_bias);

  const model::ModelConfig mx = model::parse_config(mixtral(), "mixtral");
  EXPECT_EQ(mx.moe.intermediate, 32);  // the experts are intermediate_size wide
  EXPECT_TRUE(mx.moe.norm_topk_prob);
  EXPECT_EQ(sparse_of(mx), (std::vector<bool>(4, true)));

  const model::ModelConfig ds = model::parse_config(deepseek_v3(), "ds");
  EXPECT_TRUE(ds.is_mla());
  EXPECT_EQ(ds.head_dim, 24);
  EXPECT_EQ(ds.mla.latent_width(), 24);
  EXPECT_EQ(ds.moe.router, model::Router::kSigmoidGrouped);
  EXPECT_TRUE(ds.moe.norm_topk_prob);  // DeepseekV3Config's default
  EXPECT_EQ(ds.moe.shared_intermediate, 32);
  EXPECT_EQ(sparse_of(ds), (std::vector<bool>{false, true, true, true}));
  EXPECT_TRUE(ds.rope_scaling.yarn);
  EXPECT_DOUBLE_EQ(ds.rope_scaling.attention_factor, 1.0);  // mscale == mscale_all_dim
  const double m = 0.1 * std::log(40.0) + 1.0;
  EXPECT_NEAR(ds.softmax_scale(), m * m / std::sqrt(24.0), 1e-12);

  // Written back and read again: the same model.
  for (const json& j : {qwen3_moe(), qwen2_moe(), mixtral(), deepseek_v3()}) {
    const model::ModelConfig c = model::parse_config(j, "first");
    const model::ModelConfig back = model::parse_config(model::to_json(c), "back");
    EXPECT_EQ(back.architecture, c.architecture);
    EXPECT_EQ(back.moe.experts, c.moe.experts);
    EXPECT_EQ(back.moe.intermediate, c.moe.intermediate);
    EXPECT_EQ(back.moe.shared_intermediate, c.moe.shared_intermediate);
    EXPECT_EQ(back.moe.sparse_layer, c.moe.sparse_layer);
    EXPECT_EQ(back.moe.norm_topk_prob, c.moe.norm_topk_prob);
    EXPECT_EQ(back.mla.kv_lora_rank, c.mla.kv_lora_rank);
    EXPECT_EQ(back.attention_bias, c.attention_bias);
    EXPECT_DOUBLE_EQ(back.softmax_scale(), c.softmax_scale());
    // The cost model reads the same experts from it.
    const model::ModelShape shape = model::shape_from_config(c);
    for (int layer = 0; layer < c.num_layers; ++layer) EXPECT_EQ(shape.moe_layer(layer), c.moe_layer(layer));
  }
}

// Keys a family's transformers class ignores are ignored here too.
TEST(MoeConfig, EachFamilyReadsOnlyItsOwnKeys) {
  EXPECT_FALSE(model::parse_config(with(mixtral(), {{"attention_bias", true}}), "c").attention_bias);
  EXPECT_EQ(sparse_of(model::parse_config(with(qwen3_moe(), {{"first_k_dense_replace", 2}}), "c")),
            (std::vector<bool>{true, false, true, true}));
  EXPECT_TRUE(model::parse_config(with(base("Qwen2ForCausalLM"), {{"attention_bias", false}}), "c").attention_bias);
  EXPECT_FALSE(model::parse_config(with(qwen2_moe(), {{"qkv_bias", false}}), "c").attention_bias);
}

TEST(MoeConfig, BadConfigurationsNameTheirField) {
  auto refused = [](json j, const std::string& field) {
    try {
      model::parse_config(j, "cfg");
      ADD_FAILURE() << "accepted " << j.dump();
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  refused(with(qwen3_moe(), {{"num_experts_per_tok", 9}}), "num_experts_per_tok");
  json missing = qwen3_moe();
  missing.erase("moe_intermediate_size");
  refused(missing, "moe_intermediate_size");
  refused(with(qwen3_moe(), {{"mlp_only_layers", {7}}}), "mlp_only_layers");
  refused(with(deepseek_v3(), {{"scoring_func", "softmax"}}), "scoring_func");
  refused(with(deepseek_v3(), {{"topk_method", "greedy"}}), "topk_method");
  refused(with(deepseek_v3(), {{"n_group", 3}}), "n_group");
  refused(with(deepseek_v3(), {{"topk_group", 5}}), "topk_group");
  refused(with(deepseek_v3(), {{"qk_rope_head_dim", 7}}), "qk_rope_head_dim");
  refused(with(deepseek_v3(), {{"rope_scaling", {{"type", "dynamic"}, {"factor", 2.0}}}}), "type");
  refused(with(mixtral(), {{"sliding_window", 4096}}), "sliding_window");
  refused(with(mixtral(), {{"hidden_act", "gelu"}}), "hidden_act");
  refused(with(qwen3_moe(), {{"attention_bias", true}}), "attention_bias");  // o_proj would get a bias
  refused(with(deepseek_v3(), {{"attention_bias", true}}), "attention_bias");
  refused(with(base("LlamaForCausalLM"), {{"mlp_bias", true}}), "mlp_bias");
}

TEST(MoeConfig, TensorParallelErrorNamesTheAllowedSizes) {
  const model::ModelConfig c =
      model::parse_config(with(qwen3_moe(), {{"moe_intermediate_size", 18}, {"num_key_value_heads", 4}}), "c");
  model::validate_tensor_parallel(model::shape_from_config(c), 2);
  try {
    model::validate_tensor_parallel(model::shape_from_config(c), 4);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("moe_intermediate_size (18) does not divide by --tp 4"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("allows: 1, 2"), std::string::npos) << e.what();
  }
}

TEST(MoeRouter, SoftmaxTopKAndRenormalisation) {
  model::MoeConfig moe;
  moe.experts = 4;
  moe.experts_per_token = 2;
  const float logits[4] = {0.0f, 2.0f, 1.0f, -1.0f};
  int expert[2];
  float weight[2];
  cpu::choose_experts(logits, nullptr, moe, expert, weight);
  const double z = 1 + std::exp(2.0) + std::exp(1.0) + std::exp(-1.0);
  EXPECT_EQ(expert[0], 1);
  EXPECT_EQ(expert[1], 2);
  EXPECT_NEAR(weight[0], std::exp(2.0) / z, 1e-6);
  EXPECT_NEAR(weight[1], std::exp(1.0) / z, 1e-6);
  moe.norm_topk_prob = true;
  cpu::choose_experts(logits, nullptr, moe, expert, weight);
  EXPECT_NEAR(weight[0] + weight[1], 1.0, 1e-6);
  EXPECT_NEAR(weight[0], std::exp(1.0) / (std::exp(1.0) + 1.0), 1e-6);
}

TEST(MoeRouter, SigmoidGroupsBiasAndScaling) {
  model::MoeConfig moe;
  moe.router = model::Router::kSigmoidGrouped;
  moe.experts = 8;
  moe.experts_per_token = 2;
  moe.groups = 4;       // {0,1} {2,3} {4,5} {6,7}
  moe.topk_groups = 2;  // the two groups with the best two-expert sums
  moe.routed_scaling_factor = 2.0;
  // Expert 0 has the single best score, but its group {0,1} sums lower than {2,3} and {4,5}.
  const float logits[8] = {3.0f, -4.0f, 1.5f, 1.4f, 1.0f, 1.2f, -3.0f, -3.0f};
  int expert[2];
  float weight[2];
  cpu::choose_experts(logits, nullptr, moe, expert, weight);
  auto sigmoid = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  EXPECT_EQ(expert[0], 2);
  EXPECT_EQ(expert[1], 3);
  EXPECT_NEAR(weight[0], 2.0 * sigmoid(1.5), 1e-6);  // scaled, not renormalised
  // The bias chooses (expert 5 over 3) but the weight stays the plain score.
  const float bias[8] = {0, 0, 0, 0, 0, 0.5f, 0, 0};
  cpu::choose_experts(logits, bias, moe, expert, weight);
  EXPECT_EQ(expert[0], 5);
  EXPECT_EQ(expert[1], 2);
  EXPECT_NEAR(weight[0], 2.0 * sigmoid(1.2), 1e-6);
  moe.norm_topk_prob = true;
  cpu::choose_experts(logits, bias, moe, expert, weight);
  EXPECT_NEAR(weight[0] + weight[1], 2.0, 1e-6);  // renormalised, then scaled
}

// A NaN score (from a NaN hidden state) ranks below every number: the comparators stay strict
// weak orderings (std::partial_sort is undefined otherwise), and no NaN wins a slot.
TEST(MoeRouter, NanScoresRankLowest) {
  model::MoeConfig moe;
  moe.router = model::Router::kSigmoidGrouped;
  moe.experts = 8;
  moe.experts_per_token = 2;
  moe.groups = 4;
  moe.topk_groups = 2;
  const float nan = std::nanf("");
  // Group {4,5} holds a NaN: it is not among the two best groups ({0,1} and {2,3} are).
  const float logits[8] = {3.0f, -4.0f, 1.5f, 1.4f, nan, 1.2f, -3.0f, -3.0f};
  int expert[2];
  float weight[2];
  cpu::choose_experts(logits, nullptr, moe, expert, weight);
  EXPECT_EQ(expert[0], 0);
  EXPECT_EQ(expert[1], 2);
  // Every score NaN but one: that one first, then the lowest index (ties of NaN).
  float mostly_nan[8];
  std::fill(mostly_nan, mostly_nan + 8, nan);
  mostly_nan[6] = 0.5f;
  moe.topk_groups = 4;
  cpu::choose_experts(mostly_nan, nullptr, moe, expert, weight);
  EXPECT_EQ(expert[0], 6);
  EXPECT_EQ(expert[1], 0);
}

// The FLOPs the cpu backend runs on a chunk after a prefix (every GEMM: projections, the
// router, the k experts each token chose, the shared expert, MLA's absorption, attention) equal
// the analytic count the simulator and the cost model use, on each rank of a TP group.
TEST(MoeFlops, CpuComputeMatchesTheAnalyticCount) {
  for (const json& j : {qwen3_moe(), qwen2_moe(), mixtral(), deepseek_v3()}) {
    const model::ModelConfig c = model::parse_config(j, "flops");
    const model::ModelShape shape = model::shape_from_config(c);
    const auto source = model::make_synthetic_source(c, 5);
    for (int tp : {1, 2}) {
      const model::ShardSpec shard = model::make_shard_spec(c, tp, tp - 1);
      const model::StageRange layers{0, c.num_layers};
      model::StageWeights weights = model::load_stage_weights(c, *source, layers, true, false, shard);
      const int page = 16, prefix = 48, tokens = 40;
      const kv::KvShape kv_shape = compute::cache_shape(c, shard, c.num_layers, page);
      kv::PagedKvPool pool(kv_shape, kv_shape.pages_for(prefix + tokens));
      NoReduce reduce;
      compute::CpuStageCompute stage(c, shard, std::move(weights), pool, tp > 1 ? &reduce : nullptr);
      stage.prepare_prefix(0, prefix, tokens);
      std::vector<int32_t> ids(tokens);
      for (int t = 0; t < tokens; ++t) ids[t] = (t * 7) % c.vocab_size;
      std::vector<float> hidden(static_cast<size_t>(tokens) * c.hidden_size);
      stage.embed(ids.data(), tokens, hidden.data());
      const double before = cpu::counted_gemm_flops();
      stage.forward({0, prefix, tokens}, hidden.data());
      const double counted = cpu::counted_gemm_flops() - before;
      const double analytic = model::rank_chunk_flops(shape, 0, c.num_layers, tokens, prefix, tp);
      EXPECT_NEAR(counted, analytic, 1e-9 * analytic) << c.architecture_name << " tp " << tp;
      for (float v : hidden) ASSERT_TRUE(std::isfinite(v)) << c.architecture_name;
    }
  }
}

// The ranks of a TP group as threads of one process: each reduce() waits for the others and
// hands every rank the sum, as the MPI all-reduce does.
class ThreadGroupSum {
 public:
  explicit ThreadGroupSum(int ranks) : ranks_(ranks) {}
  void sum(float* data, int count) {
    std::unique_lock<std::mutex> lock(mutex_);
    const long long round = round_;
    if (arrived_ == 0)
      total_.assign(data, data + count);
    else
      for (int i = 0; i < count; ++i) total_[i] += data[i];
    if (++arrived_ == ranks_) {
      arrived_ = 0;
      ++round_;
      result_ = total_;
      changed_.notify_all();
    } else {
      changed_.wait(lock, [&] { return round_ != round; });
    }
    std::copy_n(result_.begin(), count, data);
  }

 private:
  const int ranks_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0;
  long long round_ = 0;
  std::vector<float> total_, result_;
};

class ThreadReduce final : public dist::TpAllReduce {
 public:
  explicit ThreadReduce(ThreadGroupSum& group) : TpAllReduce(false), group_(group) {}

 private:
  void reduce(float* data, int count) override { group_.sum(data, count); }
  ThreadGroupSum& group_;
};

// Whole experts per rank: a rank runs the experts it holds on the tokens that chose them, so
// its share follows the routing, but the group together runs exactly the analytic count, and
// computes what the sliced experts compute.
TEST(MoeFlops, WholeExpertsPerRankSumToTheAnalyticCount) {
  const model::ModelConfig c = model::parse_config(qwen3_moe(), "flops");
  const model::ModelShape shape = model::shape_from_config(c);
  const auto source = model::make_synthetic_source(c, 5);
  const int tp = 2, tokens = 40;
  std::vector<int32_t> ids(tokens);
  for (int t = 0; t < tokens; ++t) ids[t] = (t * 7) % c.vocab_size;
  std::map<model::ExpertSplit, std::vector<float>> hidden_of;
  for (model::ExpertSplit split : {model::ExpertSplit::kWidth, model::ExpertSplit::kExperts}) {
    ThreadGroupSum group(tp);
    std::vector<double> flops(tp);
    std::vector<std::vector<float>> hidden(tp);
    auto rank_main = [&](int rank) {
      const model::ShardSpec shard = model::make_shard_spec(c, tp, rank, split);
      model::StageWeights weights = model::load_stage_weights(c, *source, {0, c.num_layers}, true, false, shard);
      kv::PagedKvPool pool({c.num_layers, shard.kv_heads, c.head_dim, 16}, 3);
      ThreadReduce reduce(group);
      compute::CpuStageCompute stage(c, shard, std::move(weights), pool, &reduce);
      hidden[rank].resize(static_cast<size_t>(tokens) * c.hidden_size);
      stage.embed(ids.data(), tokens, hidden[rank].data());
      const double before = cpu::counted_gemm_flops();
      stage.forward({0, 0, tokens}, hidden[rank].data());
      flops[rank] = cpu::counted_gemm_flops() - before;
    };
    std::thread other(rank_main, 1);
    rank_main(0);
    other.join();
    const double analytic = tp * model::rank_chunk_flops(shape, 0, c.num_layers, tokens, 0, tp);
    EXPECT_NEAR(flops[0] + flops[1], analytic, 1e-9 * analytic) << model::expert_split_name(split);
    EXPECT_EQ(hidden[0], hidden[1]);  // every rank of the group holds the same residual stream
    hidden_of[split] = hidden[0];
  }
  const auto& width = hidden_of[model::ExpertSplit::kWidth];
  const auto& whole = hidden_of[model::ExpertSplit::kExperts];
  for (size_t i = 0; i < width.size(); ++i) EXPECT_NEAR(whole[i], width[i], 1e-4 * (1 + std::abs(width[i])));
  const model::ShardSpec second = model::make_shard_spec(c, tp, 1, model::ExpertSplit::kExperts);
  EXPECT_EQ(second.expert_begin, 4);
  EXPECT_EQ(second.expert_count, 4);
  EXPECT_EQ(second.expert_intermediate, 32);
  try {
    model::validate_tensor_parallel(model::shape_from_config(c), 16, model::ExpertSplit::kExperts);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("allows: 1, 2"), std::string::npos) << e.what();
  }
}

TEST(ExpertLoad, BusiestExpertAndBusiestRankOfWholeExperts) {
  trace::ExpertLoad load;
  load.experts = 4;
  load.tp = 2;
  load.rows = {{10, 10, 10, 10}, {40, 0, 0, 0}, {30, 10, 0, 0}};
  // busiest / mean expert: 1, 4, 3 -> 8/3; busiest rank / even share: 1, 2, 2 -> 5/3.
  EXPECT_NEAR(load.max_over_mean(), 8.0 / 3.0, 1e-12);
  EXPECT_NEAR(load.busiest_rank_share(), 5.0 / 3.0, 1e-12);
  load.tp = 3;  // 4 experts do not split into 3 ranks
  EXPECT_EQ(load.busiest_rank_share(), 0.0);
}
