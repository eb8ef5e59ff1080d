// One pipeline stage's compute on the CPU backend: embed (stage 0), the stage's decoder
// layers on one chunk, and the LM head (last stage). It owns the weights and a workspace,
// writes K/V into the stage's paged pool, and calls back for the TP all-reduce so it stays
// free of MPI (benchmarks run it in one process).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "compute/cpu/attention.hpp"
#include "kvcache/paged_kv_pool.hpp"
#include "model/config.hpp"
#include "model/weights.hpp"

namespace pf::compute {

struct ChunkContext {
  int prompt = 0;
  int64_t pos0 = 0;  // prefix already in the cache = position of the chunk's first token
  int tokens = 0;
};

// Sums `count` floats in place across the TP group (identity when tp == 1).
using AllReduce = std::function<void(float* data, int count)>;

class CpuStageCompute {
 public:
  CpuStageCompute(const model::ModelConfig& config, const model::ShardSpec& shard, model::StageWeights weights,
                  kv::PagedKvPool& kv_pool);

  // hidden[t, :] = embedding[tokens[t], :]
  void embed(const int32_t* tokens, int count, float* hidden) const;
  // Runs every local layer on hidden [tokens, H] in place; appends the chunk's K/V.
  // `all_reduce` sums the row-parallel partial results across the TP group (unused at tp 1).
  void forward(const ChunkContext& chunk, float* hidden, const AllReduce& all_reduce);
  // Final norm + this rank's vocabulary shard of the LM head on one hidden row.
  void lm_head(const float* hidden_row, float* logits_shard);

  const model::ShardSpec& shard() const { return shard_; }
  // FLOPs of forward() for one chunk on this rank (for achieved-rate reports).
  double forward_flops(const ChunkContext& chunk) const;

 private:
  void layer_forward(int layer, const ChunkContext& chunk, float* hidden, const AllReduce& all_reduce);

  model::ModelConfig config_;
  model::ShardSpec shard_;
  model::StageWeights weights_;
  kv::PagedKvPool& kv_pool_;
  std::vector<double> inv_freq_;
  // Workspace, grown to the largest chunk seen.
  std::vector<float> normed_, qkv_, attn_, proj_, gate_up_, act_;
  cpu::AttentionWorkspace attention_ws_;
};

}  // namespace pf::compute
