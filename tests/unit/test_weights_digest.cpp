// The weights' identity (model/weights_digest.hpp): every layout of the same model gives the
// same identity, and changing any single value of any tensor changes it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <tuple>

#include "errors.hpp"
#include "model/layer_partition.hpp"
#include "model/presets.hpp"
#include "model/weights.hpp"
#include "model/weights_digest.hpp"

using namespace pf;

namespace {

// A source that returns another's values with one element changed (a targeted fix, a merged
// low-rank update: an edit far smaller than any sampling would see).
class EditedSource final : public model::TensorSource {
 public:
  EditedSource(const model::TensorSource& base, std::string tensor, int64_t row, int64_t col, float delta)
      : base_(base), tensor_(std::move(tensor)), row_(row), col_(col), delta_(delta) {}
  bool has(const std::string& name) const override { return base_.has(name); }
  std::vector<std::string> names() const override { return base_.names(); }
  std::vector<int64_t> shape(const std::string& name) const override { return base_.shape(name); }
  void read_block(const std::string& name, int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                  float* out) const override {
    base_.read_block(name, row0, rows, col0, cols, out);
    if (name == tensor_ && row_ >= row0 && row_ < row0 + rows && col_ >= col0 && col_ < col0 + cols)
      edit(out[(row_ - row0) * cols + (col_ - col0)]);
  }
  uint64_t fingerprint(const std::string& name) const override { return base_.fingerprint(name); }

 private:
  // delta 0: the next float up (the smallest change a value can take).
  void edit(float& value) const { value = delta_ == 0 ? std::nextafter(value, INFINITY) : value + delta_; }
  const model::TensorSource& base_;
  std::string tensor_;
  int64_t row_, col_;
  float delta_;
};

// What every rank of a pp x tp layout reads, digested, combined as rank 0 does.
std::string identity_of(const model::ModelConfig& c, const model::TensorSource& source, int pp, int tp,
                        model::ExpertSplit split = model::ExpertSplit::kWidth) {
  std::vector<model::BlockDigest> all;
  const auto partition = model::default_partition(c.num_layers, pp);
  for (int stage = 0; stage < pp; ++stage)
    for (int rank = 0; rank < tp; ++rank) {
      const model::StageWeights w = model::load_stage_weights(c, source, partition[stage], stage == 0, stage == pp - 1,
                                                              model::make_shard_spec(c, tp, rank, split));
      all.insert(all.end(), w.record.digests.begin(), w.record.digests.end());
    }
  return model::combine_digests(model::deserialize_digests(model::serialize(all)), model::expected_tensors(c));
}

}  // namespace

TEST(WeightsIdentity, SameForEveryLayout) {
  for (const char* preset : {"tiny", "tiny-qwen2", "tiny-moe", "tiny-mla"}) {
    SCOPED_TRACE(preset);
    const model::ModelConfig c = model::preset_config(preset);
    const auto source = model::make_synthetic_source(c, 3);
    const std::string whole = identity_of(c, *source, 1, 1);
    EXPECT_EQ(identity_of(c, *source, 2, 1), whole);
    EXPECT_EQ(identity_of(c, *source, 2, 2), whole);
    EXPECT_EQ(identity_of(c, *source, 1, 2), whole);
    if (c.is_moe()) {
      EXPECT_EQ(identity_of(c, *source, 2, 2, model::ExpertSplit::kExperts), whole);
    }
    EXPECT_NE(identity_of(c, *model::make_synthetic_source(c, 4), 2, 2), whole) << "another seed";
  }
}

TEST(WeightsIdentity, ChangesWithAnySingleValue) {
  const model::ModelConfig c = model::preset_config("tiny-qwen2");  // tied: the LM head reads the embedding
  const auto source = model::make_synthetic_source(c, 3);
  const std::string original = identity_of(c, *source, 2, 2);
  const std::string gate = "model.layers.1.mlp.gate_proj.weight";
  for (const auto& [tensor, row, col] :
       std::vector<std::tuple<std::string, int64_t, int64_t>>{{gate, 100, 17},
                                                              {gate, 0, 0},
                                                              {"model.embed_tokens.weight", 300, 5},
                                                              {"model.layers.0.self_attn.o_proj.weight", 3, 60},
                                                              {"model.norm.weight", 7, 0}}) {
    SCOPED_TRACE(tensor + " " + std::to_string(row) + "," + std::to_string(col));
    // The smallest change a float can take, and a large one: both seen, on any layout.
    EditedSource tiny_edit(*source, tensor, row, col, 0.0f), big_edit(*source, tensor, row, col, 1.0f);
    EXPECT_NE(identity_of(c, tiny_edit, 2, 2), original);
    EXPECT_NE(identity_of(c, big_edit, 1, 1), original);
    EXPECT_EQ(identity_of(c, big_edit, 1, 1), identity_of(c, big_edit, 2, 2));
  }
}

TEST(WeightsIdentity, RanksThatReadOtherValuesAreNamed) {
  const model::ModelConfig c = model::preset_config("tiny");
  const auto source = model::make_synthetic_source(c, 3);
  const auto partition = model::default_partition(c.num_layers, 1);
  std::vector<model::BlockDigest> all;
  for (int rank = 0; rank < 2; ++rank) {                           // tp 2: both ranks read the norms whole
    EditedSource stale(*source, "model.norm.weight", 2, 0, 0.5f);  // rank 1's node has another copy
    const model::TensorSource& seen = rank == 1 ? static_cast<const model::TensorSource&>(stale) : *source;
    const auto w = model::load_stage_weights(c, seen, partition[0], true, true, model::make_shard_spec(c, 2, rank));
    all.insert(all.end(), w.record.digests.begin(), w.record.digests.end());
  }
  try {
    model::combine_digests(all, model::expected_tensors(c));
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("model.norm.weight"), std::string::npos) << e.what();
  }
}

// A tied LM head (tiny-qwen2) at pp 2 x tp 2: the last stage reads vocabulary slices of the
// embedding that stage 0 read whole. A node whose copy differs there is caught too.
TEST(WeightsIdentity, ATiedHeadsSlicesAreComparedWithTheEmbedding) {
  const model::ModelConfig c = model::preset_config("tiny-qwen2");
  ASSERT_TRUE(c.tie_word_embeddings);
  const auto source = model::make_synthetic_source(c, 3);
  EditedSource stale(*source, "model.embed_tokens.weight", c.vocab_size - 3, 7, 0.25f);  // in rank 1's slice
  const auto partition = model::default_partition(c.num_layers, 2);
  std::vector<model::BlockDigest> all;
  for (int stage = 0; stage < 2; ++stage)
    for (int rank = 0; rank < 2; ++rank) {
      const model::TensorSource& seen =
          stage == 1 && rank == 1 ? static_cast<const model::TensorSource&>(stale) : *source;
      const auto w = model::load_stage_weights(c, seen, partition[stage], stage == 0, stage == 1,
                                               model::make_shard_spec(c, 2, rank));
      all.insert(all.end(), w.record.digests.begin(), w.record.digests.end());
    }
  try {
    model::combine_digests(all, model::expected_tensors(c));
    FAIL() << "the stale slice was not seen";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("model.embed_tokens.weight"), std::string::npos) << e.what();
  }
}

TEST(WeightsIdentity, UnreadValuesAreABug) {
  // A part of a tensor that no rank read would be left out of the identity: a loader bug.
  const model::ModelConfig c = model::preset_config("tiny");
  const auto source = model::make_synthetic_source(c, 3);
  const auto partition = model::default_partition(c.num_layers, 1);
  std::vector<model::BlockDigest> all;
  for (int rank = 0; rank < 2; ++rank) {
    const auto w = model::load_stage_weights(c, *source, partition[0], true, true, model::make_shard_spec(c, 2, rank));
    for (const auto& b : w.record.digests)
      if (rank == 0 || b.tensor != "model.layers.0.mlp.down_proj.weight") all.push_back(b);
  }
  EXPECT_THROW(model::combine_digests(all, model::expected_tensors(c)), std::logic_error);
}
