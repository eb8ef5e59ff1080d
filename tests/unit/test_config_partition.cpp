// config.json parsing (every architecture, rope_scaling) and the layer partition.
#include <gtest/gtest.h>

#include "errors.hpp"
#include "model/config.hpp"
#include "model/layer_partition.hpp"
#include "model/model_shape.hpp"
#include "model/presets.hpp"
#include "pipeline/rank_setup.hpp"

using namespace pf;
using namespace pf::model;

TEST(Config, PresetsRoundTripThroughJson) {
  for (const auto& name : preset_names()) {
    const ModelConfig c = preset_config(name);
    const ModelConfig back = parse_config(to_json(c), name);
    EXPECT_EQ(back.architecture, c.architecture) << name;
    EXPECT_EQ(back.hidden_size, c.hidden_size);
    EXPECT_EQ(back.head_dim, c.head_dim);
    EXPECT_EQ(back.num_kv_heads, c.num_kv_heads);
    EXPECT_EQ(back.attention_bias, c.attention_bias);
    EXPECT_EQ(back.qk_norm, c.qk_norm);
    EXPECT_EQ(back.tie_word_embeddings, c.tie_word_embeddings);
    EXPECT_EQ(back.rope_scaling.llama3, c.rope_scaling.llama3);
    EXPECT_EQ(back.total_parameters(), c.total_parameters());
  }
}

TEST(Config, PresetSizes) {
  EXPECT_EQ(preset_config("tiny").hidden_size, 128);
  EXPECT_EQ(preset_config("tiny").num_layers, 8);
  EXPECT_EQ(preset_config("tiny").vocab_size, 512);
  const double small = preset_config("small").total_parameters() / 1e6;
  EXPECT_GT(small, 230);
  EXPECT_LT(small, 280);
  const double llama = preset_config("llama3-8b").total_parameters() / 1e9;
  EXPECT_NEAR(llama, 8.03, 0.02);  // Llama-3-8B has 8.03B parameters
  EXPECT_THROW(preset_config("huge"), UserError);
}

TEST(Config, QwenDefaults) {
  nlohmann::json j = {{"architectures", {"Qwen2ForCausalLM"}},
                      {"hidden_size", 64},
                      {"intermediate_size", 128},
                      {"num_hidden_layers", 2},
                      {"num_attention_heads", 4},
                      {"num_key_value_heads", 2},
                      {"vocab_size", 100}};
  ModelConfig c = parse_config(j, "cfg");
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 16);
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["head_dim"] = 32;
  c = parse_config(j, "cfg");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.head_dim, 32);
}

TEST(Config, Errors) {
  nlohmann::json j = to_json(preset_config("tiny"));
  auto bad = j;
  bad["architectures"] = {"GPT2LMHeadModel"};
  EXPECT_THROW(parse_config(bad, "cfg"), UserError);
  bad = j;
  bad.erase("hidden_size");
  EXPECT_THROW(parse_config(bad, "cfg"), UserError);
  bad = j;
  bad["num_key_value_heads"] = 3;  // 4 heads do not group into 3
  EXPECT_THROW(parse_config(bad, "cfg"), UserError);
  bad = j;
  bad["rope_scaling"] = {{"rope_type", "yarn"}, {"original_max_position_embeddings", 64}};  // no factor
  EXPECT_THROW(parse_config(bad, "cfg"), UserError);
  bad = j;
  bad["hidden_size"] = "wide";
  EXPECT_THROW(parse_config(bad, "cfg"), UserError);
}

TEST(Partition, DefaultPutsRemainderOnLastStages) {
  const auto p = default_partition(62, 4);  // 15, 15, 16, 16
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(partition_text(p), "15,15,16,16");
  EXPECT_EQ(p[2].first, 30);
  EXPECT_EQ(partition_text(default_partition(8, 3)), "2,3,3");
  EXPECT_EQ(partition_text(default_partition(8, 8)), "1,1,1,1,1,1,1,1");
  EXPECT_THROW(default_partition(8, 9), UserError);  // more stages than layers
}

TEST(Partition, Explicit) {
  const auto p = parse_partition("2,4,2", 8, 3);
  EXPECT_EQ(p[1].first, 2);
  EXPECT_EQ(p[1].count, 4);
  EXPECT_EQ(p[2].first, 6);
  EXPECT_THROW(parse_partition("4,4", 8, 3), UserError);    // count
  EXPECT_THROW(parse_partition("2,2,2", 8, 3), UserError);  // sum
  EXPECT_THROW(parse_partition("4,0,4", 8, 3), UserError);  // empty stage
  EXPECT_THROW(parse_partition("4,x,4", 8, 3), UserError);  // not a number
  EXPECT_THROW(parse_partition("4,2.5,4", 8, 3), UserError);
  // Typos are not splits: a trailing comma, a sign, spaces, a count past any model's.
  for (const char* typo : {"4,4,", ",4,4", "4,,4", "+4,4", " 4,4", "4, 4", "99999999999,1", ""})
    EXPECT_THROW(parse_partition(typo, 8, 2), UserError) << typo;
}

TEST(Partition, BalancedGivesTheLastStageFewerLayersForItsExtraWork) {
  EXPECT_EQ(partition_text(balanced_partition(30, 4, 0)), partition_text(default_partition(30, 4)));
  EXPECT_EQ(partition_text(balanced_partition(29, 4, 0)), "7,7,7,8");
  // 30 layers + 6 layers' worth of LM head over 2 stages: 18 each.
  EXPECT_EQ(partition_text(balanced_partition(30, 2, 6)), "18,12");
  // 36 / 4 = 9 a stage, less 6 for the last: 3 layers; the 27 others evenly.
  EXPECT_EQ(partition_text(balanced_partition(30, 4, 6)), "9,9,9,3");
  EXPECT_EQ(partition_text(balanced_partition(4, 2, 100)), "3,1");   // at least one layer each
  EXPECT_EQ(partition_text(balanced_partition(4, 2, 1e12)), "3,1");  // no overflow on absurd extras
  EXPECT_EQ(partition_text(balanced_partition(4, 4, 3)), "1,1,1,1");
}

TEST(Partition, LmHeadInLayersWeighsTheVocabularyAgainstALayer) {
  const ModelShape shape = shape_from_config(preset_config("llama3-8b"));
  // One prompt of 4,096 tokens, all scored: 2 x 4096 x 128256 FLOPs a token against a layer's
  // 0.44 GFLOP of projections plus attention over 2,048 earlier positions on average.
  const double head = 2.0 * 4096 * 128256;
  const double layer = 2.0 * 218.1e6 + 2.0 * 32 * 256 * 0.5 * 4097;  // 218.1M weights a layer
  EXPECT_NEAR(lm_head_in_layers(shape, {4096}, {4096}), head / layer, 0.01 * head / layer);
  // Only scored positions count: half of them, half the head.
  EXPECT_NEAR(lm_head_in_layers(shape, {4096}, {2048}), 0.5 * lm_head_in_layers(shape, {4096}, {4096}), 1e-9);
  EXPECT_EQ(lm_head_in_layers(shape, {4096}, {0}), 0.0);
  EXPECT_EQ(lm_head_in_layers(shape, {}, {}), 0.0);
  // Attention grows with the position: deep in a long prompt the head is a small part of a
  // layer; a batch of short prompts weighs it more.
  EXPECT_LT(lm_head_in_layers(shape, {131072}, {131072}), 0.4 * lm_head_in_layers(shape, {4096}, {4096}));
  EXPECT_GT(lm_head_in_layers(shape, {512, 512, 512}, {512, 512, 512}), lm_head_in_layers(shape, {4096}, {4096}));
}

TEST(Partition, ARunsPartitionComesFromTheUserTheProfileOrItsPrompts) {
  pipeline::RankModel m;
  m.shape = shape_from_config(preset_config("llama3-8b"));  // 32 layers
  m.partition = default_partition(32, 2);
  // Nothing scored: SGLang's default.
  EXPECT_EQ(partition_text(pipeline::run_partition(m, 2, {4096}, {0}, "")), "16,16");
  // Every token of short prompts scored: the head (about 2.3 layers at 4K) lightens the last stage;
  // deep in a long prompt it is worth too little to move a layer.
  EXPECT_EQ(partition_text(pipeline::run_partition(m, 2, {4096}, {4096}, "")), "17,15");
  EXPECT_EQ(partition_text(pipeline::run_partition(m, 2, {131072}, {131072}, "")), "16,16");
  // A saved profile's partition: its costs were timed on those layers.
  EXPECT_EQ(partition_text(pipeline::run_partition(m, 2, {4096}, {4096}, "20,12")), "20,12");
  // One of another layout is not taken (the profile's identity check says what differs).
  EXPECT_EQ(partition_text(pipeline::run_partition(m, 2, {4096}, {4096}, "8,8,16")), "17,15");
  // --layer-partition wins over both.
  m.partition = parse_partition("10,22", 32, 2);
  m.partition_given = true;
  EXPECT_EQ(partition_text(pipeline::run_partition(m, 2, {4096}, {4096}, "20,12")), "10,22");
}

TEST(Partition, SuggestedFromMeasuredBusyTimes) {
  // 15 + 15 layers; stage 0 took 10 s (2/3 s a layer), the last 16 s: 6 s of it beyond its
  // layers, 9 layers' worth, so 39 layers' load over 2 stages: 19.5 each, the last 10.5 of it
  // layers (rounded to 11).
  const auto used = default_partition(30, 2);
  const auto better = suggested_partition(used, {10.0, 16.0});
  EXPECT_EQ(partition_text(better), "19,11");
  EXPECT_TRUE(suggested_partition(used, {0.0, 0.0}).empty());
  EXPECT_TRUE(suggested_partition(default_partition(30, 1), {5.0}).empty());
}
