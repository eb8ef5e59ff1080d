// The last layer for the rows that are read (compute::OutputRows): a stage told that only a
// chunk's last row is read after it, or none, still appends every row's K/V in every layer,
// gives that row the hidden state of the full forward within float32 rounding, and skips
// the last layer's attention, o projection and feed-forward on the others (its GEMM FLOPs
// say so). Checked against the same stage run on every row, on the cpu backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "compute/cpu/cpu_stage_compute.hpp"
#include "kvcache/paged_kv_pool.hpp"
#include "model/model_source.hpp"
#include "model/weights.hpp"

using namespace pf;

namespace {

struct Stage {
  kv::PagedKvPool pool;
  compute::CpuStageCompute compute;
  Stage(const model::ModelConfig& c, const model::ShardSpec& shard, const model::StageWeights& weights)
      : pool({c.num_layers, shard.kv_heads, c.head_dim, 16}, 16), compute(c, shard, weights, pool) {}
};

class OutputRows : public ::testing::TestWithParam<const char*> {};

TEST_P(OutputRows, LastLayerRunsOnlyTheRowsReadAndEveryRowsKvIsAppended) {
  const model::ModelSource source = model::open_model(std::string("synthetic:") + GetParam(), 11);
  const model::ModelConfig& c = source.config;
  const model::ShardSpec shard = model::make_shard_spec(c, 1, 0);
  const model::StageWeights weights =
      model::load_stage_weights(c, *source.tensors, {0, c.num_layers}, true, true, shard);
  Stage all(c, shard, weights), read(c, shard, weights);

  const int h = c.hidden_size, length = 100;
  const int chunks[][2] = {{0, 48}, {48, 80}, {80, length}};
  std::vector<int32_t> tokens(length);
  for (int i = 0; i < length; ++i) tokens[i] = (i * 29 + 5) % c.vocab_size;
  std::vector<float> full, last;
  for (const auto& chunk : chunks) {
    const int t = chunk[1] - chunk[0];
    const bool is_last = chunk[1] == length;
    full.assign(size_t(t) * h, 0);
    last.assign(size_t(t) * h, 0);
    all.compute.embed(tokens.data() + chunk[0], t, full.data());
    read.compute.embed(tokens.data() + chunk[0], t, last.data());
    all.compute.forward({0, chunk[0], t}, full.data());
    read.compute.forward({0, chunk[0], t, -1, is_last ? t - 1 : t}, last.data());
  }

  // The prompt's last row: the full forward's within float32 rounding of one layer.
  const int t = chunks[2][1] - chunks[2][0];
  double error = 0, scale = 0;
  for (int k = 0; k < h; ++k) {
    const float want = full[size_t(t - 1) * h + k];
    error = std::max(error, double(std::abs(last[size_t(t - 1) * h + k] - want)));
    scale = std::max(scale, double(std::abs(want)));
  }
  EXPECT_LE(error, 1e-5 * scale) << GetParam() << ": max|h| " << scale;

  // Every layer's K/V of every position, bit for bit: the last layer's too.
  const size_t values = size_t(c.num_layers) * shard.kv_heads * length * c.head_dim;
  std::vector<float> keys_all(values), values_all(values), keys_read(values), values_read(values);
  all.compute.read_kv(0, 0, length, keys_all.data(), values_all.data());
  read.compute.read_kv(0, 0, length, keys_read.data(), values_read.data());
  EXPECT_EQ(keys_all, keys_read) << GetParam();
  EXPECT_EQ(values_all, values_read) << GetParam();

  // The last layer's work after its q/k/v projection was done for one row of 100: what is
  // left is at most the other layers' GEMMs and the last one's projection of every row.
  const double gemm_all = all.compute.op_times().gemm_flops, gemm_read = read.compute.op_times().gemm_flops;
  const double per_layer = gemm_all / c.num_layers;
  EXPECT_LT(gemm_read, gemm_all - 0.5 * per_layer) << GetParam();
  EXPECT_GT(gemm_read, gemm_all - per_layer) << GetParam();
  EXPECT_LT(read.compute.op_times().attention_flops, all.compute.op_times().attention_flops) << GetParam();
}

// Dense (Llama), q/k/v biases (Qwen2), q/k norms (Qwen3), experts (Qwen3-MoE).
INSTANTIATE_TEST_SUITE_P(Presets, OutputRows, ::testing::Values("tiny", "tiny-qwen2", "tiny-qwen3", "tiny-moe"));

}  // namespace
