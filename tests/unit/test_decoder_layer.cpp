// The decoder-layer recipe (compute/decoder_layer.cpp) and the TP reducers' bookkeeping
// (dist/tp_all_reduce.hpp). The expected op sequences are the layer as both backends wrote
// it before the recipe existed (Megatron TP; q/k bias for Qwen2, q/k norm for Qwen3; with
// tp == 1 the row-parallel projections go straight onto the residual), so a change of order
// here is a change of every backend's arithmetic.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compute/decoder_layer.hpp"
#include "dist/tp_all_reduce.hpp"

using namespace pf;
using compute::Buffer;
using compute::Norm;
using compute::Projection;

namespace {

const char* name(Buffer b) {
  switch (b) {
    case Buffer::kHidden:
      return "hidden";
    case Buffer::kNormed:
      return "normed";
    case Buffer::kQkv:
      return "qkv";
    case Buffer::kAttention:
      return "attention";
    case Buffer::kPartial:
      return "partial";
    case Buffer::kGateUp:
      return "gate_up";
    case Buffer::kActivation:
      return "activation";
  }
  return "?";
}

const char* name(Projection p) {
  switch (p) {
    case Projection::kQkv:
      return "W_qkv";
    case Projection::kO:
      return "W_o";
    case Projection::kGateUp:
      return "W_gate_up";
    case Projection::kDown:
      return "W_down";
  }
  return "?";
}

// Writes each op as one line.
class RecordingOps final : public compute::LayerOps {
 public:
  std::vector<std::string> ops;

  void select_layer(int layer) override { ops.push_back("layer " + std::to_string(layer)); }
  void rms_norm(Norm norm) override { ops.push_back(norm == Norm::kInput ? "norm input" : "norm post"); }
  void project(Buffer in, Projection w, Buffer out) override {
    ops.push_back(std::string("project ") + name(in) + " " + name(w) + " -> " + name(out));
  }
  void project_onto_residual(Buffer in, Projection w) override {
    ops.push_back(std::string("project ") + name(in) + " " + name(w) + " onto hidden");
  }
  void add_qkv_bias() override { ops.push_back("qkv bias"); }
  void qk_norm() override { ops.push_back("qk norm"); }
  void rope() override { ops.push_back("rope"); }
  void append_kv() override { ops.push_back("append kv"); }
  void attention() override { ops.push_back("attention"); }
  void latent_projections() override { ops.push_back("latent projections"); }
  void latent_rope() override { ops.push_back("latent rope"); }
  void append_latent() override { ops.push_back("append latent"); }
  void latent_attention() override { ops.push_back("latent attention"); }
  void swiglu() override { ops.push_back("swiglu"); }
  void all_reduce(Buffer b) override { ops.push_back(std::string("all-reduce ") + name(b)); }
  void add_to_residual(Buffer b) override { ops.push_back(std::string("hidden += ") + name(b)); }
  bool keep_rows_from(int first) override {
    ops.push_back("keep rows from " + std::to_string(first));
    return narrows;
  }
  bool narrows = true;  // false: a backend that computes every row anyway
};

std::vector<std::string> run(bool qkv_bias, bool qk_norm, bool tensor_parallel) {
  compute::LayerRecipe recipe;
  recipe.qkv_bias = qkv_bias;
  recipe.qk_norm = qk_norm;
  recipe.tensor_parallel = tensor_parallel;
  RecordingOps ops;
  compute::forward_layers(ops, 1, recipe);
  return ops.ops;
}

}  // namespace

TEST(DecoderLayer, LlamaWithoutTensorParallelismAddsProjectionsOntoTheResidual) {
  const std::vector<std::string> expected = {
      "layer 0",
      "norm input",
      "project normed W_qkv -> qkv",
      "rope",
      "append kv",
      "attention",
      "project attention W_o onto hidden",
      "norm post",
      "project normed W_gate_up -> gate_up",
      "swiglu",
      "project activation W_down onto hidden",
  };
  EXPECT_EQ(run(false, false, false), expected);
}

TEST(DecoderLayer, TensorParallelReducesEachRowParallelProjectionBeforeTheAdd) {
  const std::vector<std::string> expected = {
      "layer 0",
      "norm input",
      "project normed W_qkv -> qkv",
      "rope",
      "append kv",
      "attention",
      "project attention W_o -> partial",
      "all-reduce partial",
      "hidden += partial",
      "norm post",
      "project normed W_gate_up -> gate_up",
      "swiglu",
      "project activation W_down -> partial",
      "all-reduce partial",
      "hidden += partial",
  };
  EXPECT_EQ(run(false, false, true), expected);
}

TEST(DecoderLayer, BiasThenQkNormComeBetweenTheQkvProjectionAndRope) {
  const std::vector<std::string> both = run(true, true, false);
  ASSERT_GE(both.size(), 6u);
  EXPECT_EQ(std::vector<std::string>(both.begin() + 2, both.begin() + 6),
            (std::vector<std::string>{"project normed W_qkv -> qkv", "qkv bias", "qk norm", "rope"}));
  const std::vector<std::string> bias = run(true, false, false);  // Qwen2
  EXPECT_EQ(std::vector<std::string>(bias.begin() + 2, bias.begin() + 5),
            (std::vector<std::string>{"project normed W_qkv -> qkv", "qkv bias", "rope"}));
  const std::vector<std::string> norm = run(false, true, false);  // Qwen3
  EXPECT_EQ(std::vector<std::string>(norm.begin() + 2, norm.begin() + 5),
            (std::vector<std::string>{"project normed W_qkv -> qkv", "qk norm", "rope"}));
}

TEST(DecoderLayer, LatentAttentionHasItsOwnOps) {
  compute::LayerRecipe recipe;
  recipe.latent_attention = true;
  RecordingOps ops;
  compute::forward_layers(ops, 1, recipe);
  ASSERT_GE(ops.ops.size(), 7u);
  EXPECT_EQ(std::vector<std::string>(ops.ops.begin() + 2, ops.ops.begin() + 7),
            (std::vector<std::string>{"latent projections", "latent rope", "append latent", "latent attention",
                                      "project attention W_o onto hidden"}));
}

TEST(DecoderLayer, EveryLayerInTurn) {
  compute::LayerRecipe recipe;
  RecordingOps ops;
  compute::forward_layers(ops, 3, recipe);
  ASSERT_EQ(ops.ops.size(), 33u);
  EXPECT_EQ(ops.ops[0], "layer 0");
  EXPECT_EQ(ops.ops[11], "layer 1");
  EXPECT_EQ(ops.ops[22], "layer 2");
}

// Only the last layer narrows to the rows read, once every row's K/V are appended; with no
// row read it ends there; a backend that does not narrow runs the whole layer.
TEST(DecoderLayer, TheLastLayerRunsOnlyTheRowsReadAfterAppendingEveryRowsKv) {
  compute::LayerRecipe recipe;
  RecordingOps ops;
  compute::forward_layers(ops, 2, recipe, {9, 10});
  ASSERT_EQ(ops.ops.size(), 23u);
  EXPECT_EQ(std::vector<std::string>(ops.ops.begin() + 11, ops.ops.begin() + 18),
            (std::vector<std::string>{"layer 1", "norm input", "project normed W_qkv -> qkv", "rope", "append kv",
                                      "keep rows from 9", "attention"}));

  RecordingOps none;
  compute::forward_layers(none, 2, recipe, {10, 10});
  EXPECT_EQ(none.ops.size(), 17u);
  EXPECT_EQ(none.ops.back(), "keep rows from 10");

  RecordingOps whole;
  whole.narrows = false;
  compute::forward_layers(whole, 2, recipe, {10, 10});
  EXPECT_EQ(whole.ops.size(), 23u);
  EXPECT_EQ(whole.ops.back(), "project activation W_down onto hidden");

  RecordingOps all;
  compute::forward_layers(all, 2, recipe, {0, 10});
  EXPECT_EQ(all.ops.size(), 22u);  // (no narrowing asked)
}

TEST(DecoderLayer, ShapeWidthsOfOneTensorParallelRank) {
  model::ModelConfig config;
  config.hidden_size = 64;
  config.head_dim = 16;
  model::ShardSpec shard;
  shard.tp = 2;
  shard.heads = 2;
  shard.kv_heads = 1;
  shard.intermediate = 96;
  const compute::LayerShape shape(config, shard);
  EXPECT_EQ(shape.width(Buffer::kQkv), (2 + 2 * 1) * 16);
  EXPECT_EQ(shape.width(Buffer::kAttention), 32);
  EXPECT_EQ(shape.width(Buffer::kGateUp), 192);
  EXPECT_EQ(shape.width(Buffer::kActivation), 96);
  EXPECT_EQ(shape.width(Buffer::kPartial), 64);
  // [out, in] of each weight: o and down are row parallel (their inputs are sharded).
  EXPECT_EQ(shape.in_width(Projection::kO), 32);
  EXPECT_EQ(shape.out_width(Projection::kO), 64);
  EXPECT_EQ(shape.in_width(Projection::kDown), 96);
  EXPECT_EQ(shape.out_width(Projection::kGateUp), 192);
  EXPECT_TRUE(compute::LayerRecipe::of(config, shard).tensor_parallel);
}

namespace {

// Doubles in place, as a group of two ranks holding the same values would sum them.
class DoublingReduce final : public dist::TpAllReduce {
 public:
  explicit DoublingReduce(bool blocks_host) : TpAllReduce(blocks_host) {}

 private:
  void reduce(float* data, int count) override {
    for (int i = 0; i < count; ++i) data[i] *= 2;
  }
};

}  // namespace

TEST(TpAllReduce, CountsPayloadAndRecordsSpansOnlyWhenItBlocks) {
  std::vector<float> values = {1, 2, 3};
  DoublingReduce blocking(/*blocks_host=*/true);
  blocking.sum(values.data(), 3);
  blocking.sum(values.data(), 2);
  EXPECT_EQ(values, (std::vector<float>{4, 8, 6}));
  EXPECT_EQ(blocking.payload_bytes(), 4 * (3 + 2));
  const std::vector<dist::HostSpan> spans = blocking.take_spans();
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_LE(spans[0].start_s, spans[0].end_s);
  EXPECT_LE(spans[0].end_s, spans[1].start_s);
  EXPECT_TRUE(blocking.take_spans().empty());  // taken once

  DoublingReduce enqueued(/*blocks_host=*/false);
  enqueued.sum(values.data(), 3);
  EXPECT_EQ(enqueued.payload_bytes(), 12);
  EXPECT_TRUE(enqueued.take_spans().empty());
}
