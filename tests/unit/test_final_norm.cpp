// The CPU backend's final norm (StageCompute::final_norm, what --hidden-states stores) against
// RMSNorm written out in double, and against what the LM head reads: a row's norm does not
// depend on the rows computed with it (`last` takes one row, `mean` a whole chunk), and the
// logits are the LM head's matrix times exactly that row.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "compute/cpu/cpu_stage_compute.hpp"
#include "kvcache/paged_kv_pool.hpp"
#include "model/presets.hpp"
#include "model/tensor_source.hpp"
#include "model/weights.hpp"

using namespace pf;

TEST(FinalNorm, IsRmsNormRowByRowAndWhatTheLmHeadReads) {
  const model::ModelConfig c = model::preset_config("tiny");
  const model::ShardSpec shard = model::make_shard_spec(c, 1, 0);
  const auto source = model::make_synthetic_source(c, 3);
  model::StageWeights weights = model::load_stage_weights(c, *source, {c.num_layers - 1, 1}, false, true, shard);
  const std::vector<float> norm_weight = weights.final_norm, head = weights.lm_head;
  kv::PagedKvPool pool({1, shard.kv_heads, c.head_dim, 16}, 1);
  compute::CpuStageCompute stage(c, shard, std::move(weights), pool);

  const int h = c.hidden_size, rows = 5;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> hidden(size_t(rows) * h), normed(size_t(rows) * h), one(h);
  for (float& x : hidden) x = normal(rng);
  stage.final_norm(hidden.data(), rows, normed.data());

  for (int r = 0; r < rows; ++r) {
    const float* x = hidden.data() + size_t(r) * h;
    double squares = 0;
    for (int k = 0; k < h; ++k) squares += double(x[k]) * x[k];
    const double scale = 1.0 / std::sqrt(squares / h + c.rms_norm_eps);
    for (int k = 0; k < h; ++k) {
      const double want = x[k] * scale * norm_weight[k];
      EXPECT_NEAR(normed[size_t(r) * h + k], want, 1e-5 * std::max(1.0, std::abs(want))) << "row " << r << " k " << k;
    }
    // One row alone gives the same bits as inside a chunk.
    stage.final_norm(x, 1, one.data());
    for (int k = 0; k < h; ++k) ASSERT_EQ(one[k], normed[size_t(r) * h + k]) << "row " << r << " k " << k;
  }

  // The LM head on the last row reads that very norm.
  std::vector<float> logits(stage.vocab_shard_size());
  stage.lm_head(hidden.data() + size_t(rows - 1) * h, logits.data());
  const float* last = normed.data() + size_t(rows - 1) * h;
  for (int v = 0; v < stage.vocab_shard_size(); ++v) {
    double want = 0, magnitude = 0;
    for (int k = 0; k < h; ++k) {
      want += double(head[size_t(v) * h + k]) * last[k];
      magnitude += std::abs(double(head[size_t(v) * h + k]) * last[k]);
    }
    EXPECT_NEAR(logits[v], want, 1e-5 * std::max(1.0, magnitude)) << "vocabulary row " << v;
  }
}
