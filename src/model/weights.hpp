// One rank's weights: its stage's layers, and of those only its tensor-parallel shard.
// Projections keep Hugging Face's [out, in] orientation; q/k/v are fused into one matrix
// and gate/up into another so each is a single GEMM.
#pragma once

#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/layer_partition.hpp"
#include "model/tensor_source.hpp"

namespace pf::model {

// What a TP rank holds of each sharded dimension. Heads and intermediate columns split
// evenly (validated up front); the vocabulary splits with the remainder on the first ranks.
struct ShardSpec {
  int tp = 1;
  int tp_rank = 0;
  int heads = 0;         // local query heads
  int kv_heads = 0;      // local key/value heads
  int intermediate = 0;  // local MLP width
  int vocab_begin = 0;
  int vocab_count = 0;
};
ShardSpec make_shard_spec(const ModelConfig& config, int tp, int tp_rank);
// The vocabulary rows [begin, begin + count) TP rank `tp_rank` owns (remainder on the first ranks).
struct VocabSlice {
  int begin = 0;
  int count = 0;
};
VocabSlice vocab_slice(int vocab_size, int tp, int tp_rank);
// UserError unless heads, KV heads and the MLP width divide by tp.
void validate_tensor_parallel(const ModelConfig& config, int tp);

struct LayerWeights {
  std::vector<float> input_norm;  // [H]
  std::vector<float> qkv;         // [(heads + 2 kv_heads) * head_dim, H]: local q rows, then k, then v
  std::vector<float> qkv_bias;    // same rows, empty unless attention_bias
  std::vector<float> q_norm;      // [head_dim], empty unless qk_norm
  std::vector<float> k_norm;
  std::vector<float> o;          // [H, heads * head_dim]: the columns of o_proj this rank owns
  std::vector<float> post_norm;  // [H]
  std::vector<float> gate_up;    // [2 * intermediate, H]: local gate rows, then local up rows
  std::vector<float> down;       // [H, intermediate]
};

struct StageWeights {
  std::vector<float> embedding;  // [V, H] on stage 0 only
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [H] on the last stage only
  std::vector<float> lm_head;     // [vocab_count, H] on the last stage only
  std::vector<std::string> warnings;  // e.g. tensors holding NaN or Inf
  size_t bytes() const;
};

StageWeights load_stage_weights(const ModelConfig& config, const TensorSource& source, const StageRange& stage,
                                bool first_stage, bool last_stage, const ShardSpec& shard);

}  // namespace pf::model
