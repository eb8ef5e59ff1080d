// One rank's weights: its stage's layers, and of those only its tensor-parallel shard.
// Projections keep Hugging Face's [out, in] orientation; q/k/v are fused into one matrix
// and gate/up into another so each is a single GEMM.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/layer_partition.hpp"
#include "model/model_shape.hpp"
#include "model/tensor_source.hpp"
#include "model/weights_digest.hpp"

namespace pf::model {

// How a TP group splits the routed experts (docs/choices.md): kWidth, every rank holds a
// slice of every expert's width (the default); kExperts, each rank holds whole experts,
// experts / tp of them (expert parallelism inside the TP group: the group's activations are
// replicated, so no token exchange is needed, only the same all-reduce).
enum class ExpertSplit { kWidth, kExperts };

// What a TP rank holds of each sharded dimension. Heads and intermediate columns split
// evenly (validated up front); the vocabulary splits with the remainder on the first ranks.
// MLA's latent is replicated.
struct ShardSpec {
  int tp = 1;
  int tp_rank = 0;
  int heads = 0;         // local query heads
  int kv_heads = 0;      // local key/value heads (MLA: 1, the latent every head reads)
  int intermediate = 0;  // local MLP width
  int expert_begin = 0;  // the routed experts this rank holds: [begin, begin + count)
  int expert_count = 0;
  int expert_intermediate = 0;  // local width of each of them
  int expert_slice = 0;         // which width slice of them (tp_rank, or 0 for whole experts)
  int shared_intermediate = 0;  // local width of the shared expert
  int vocab_begin = 0;
  int vocab_count = 0;
};
ShardSpec make_shard_spec(const ModelConfig& config, int tp, int tp_rank, ExpertSplit split = ExpertSplit::kWidth);
// The vocabulary rows [begin, begin + count) TP rank `tp_rank` owns (remainder on the first ranks).
struct VocabSlice {
  int begin = 0;
  int count = 0;
};
VocabSlice vocab_slice(int vocab_size, int tp, int tp_rank);
// UserError unless heads, KV heads and the MLP and expert widths divide by tp; the message
// names the TP sizes the model allows. `run` (every backend) and `advise` ask the same.
void validate_tensor_parallel(const ModelShape& shape, int tp, ExpertSplit split = ExpertSplit::kWidth);
bool tensor_parallel_divides(const ModelShape& shape, int tp, ExpertSplit split = ExpertSplit::kWidth);
// "width" / "experts", and back (UserError naming the spellings).
ExpertSplit parse_expert_split(const std::string& text);
const char* expert_split_name(ExpertSplit split);

// A SwiGLU block's slice: gate rows then up rows, and the matching down columns.
struct SwigluWeights {
  std::vector<float> gate_up;  // [2 * width, H]
  std::vector<float> down;     // [H, width]
};

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

  // Multi-head latent attention (DeepSeek), instead of qkv / q_norm / k_norm. q_b rows and
  // kv_a's rope rows are stored de-interleaved when the checkpoint's rope is interleaved.
  std::vector<float> q_a;        // [q_lora, H] (empty: no q LoRA, q_b is q_proj [heads * qk, H])
  std::vector<float> q_a_norm;   // [q_lora]
  std::vector<float> q_b;        // [heads * (nope + rope), q_lora]: local heads
  std::vector<float> kv_a;       // [kv_lora + rope, H]
  std::vector<float> kv_a_norm;  // [kv_lora]
  std::vector<float> kv_b;       // [heads * (nope + v), kv_lora]: local heads

  // Mixture of experts (a sparse layer), instead of gate_up / down.
  std::vector<float> router;           // [experts, H]
  std::vector<float> router_bias;      // [experts]: e_score_correction_bias, empty unless DeepSeek
  std::vector<SwigluWeights> experts;  // this rank's routed experts (ShardSpec), each whole or a slice
  SwigluWeights shared;                // the shared expert's slice (empty: none)
  std::vector<float> shared_gate;      // [H] (Qwen2-MoE), empty otherwise
};

// What loading noted beside the values: warnings for the user, and a digest of every block
// read (the weights' identity, model/weights_digest.hpp).
struct LoadRecord {
  std::vector<std::string> warnings;
  std::vector<BlockDigest> digests;
};

struct StageWeights {
  int first_layer = 0;           // global index of layers[0]
  std::vector<float> embedding;  // [V, H] on stage 0 only
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [H] on the last stage only
  std::vector<float> lm_head;     // [vocab_count, H] on the last stage only
  LoadRecord record;              // warnings (tensors holding NaN or Inf) and the digests of what was read
  size_t bytes() const;
};

// Takes each layer as soon as it is read, in order, instead of StageWeights::layers: a
// backend that keeps its weights elsewhere (the GPU) then never holds the stage's float32
// copy on the host, one layer at a time instead (an 8B model's 32 layers: 0.9 GB, not 28 GB).
using LayerSink = std::function<void(LayerWeights&&)>;

StageWeights load_stage_weights(const ModelConfig& config, const TensorSource& source, const StageRange& stage,
                                bool first_stage, bool last_stage, const ShardSpec& shard,
                                const LayerSink& take_layer = {});

}  // namespace pf::model
