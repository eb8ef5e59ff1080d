// The decoder-layer recipe (see decoder_layer.hpp):
//   rmsnorm -> qkv projection [+ bias] [-> q/k norm] -> RoPE -> K/V into pages -> attention
//   -> o projection [-> all-reduce] -> residual
//   rmsnorm -> gate_up projection -> SwiGLU -> down projection [-> all-reduce] -> residual
#include "compute/decoder_layer.hpp"

#include <stdexcept>

namespace pf::compute {
namespace {

// A block's row-parallel output projection into the residual stream. With TP each rank
// holds a partial sum, so it is reduced before the add; without, nothing stands between
// the GEMM and the add, and the backend may fuse them.
void residual_projection(LayerOps& ops, const LayerRecipe& recipe, Buffer in, Projection projection) {
  if (!recipe.tensor_parallel) return ops.project_onto_residual(in, projection);
  ops.project(in, projection, Buffer::kPartial);
  ops.all_reduce(Buffer::kPartial);
  ops.add_to_residual(Buffer::kPartial);
}

// Grouped-query attention over the paged KV cache: kNormed -> kAttention. (MLA: a second
// mixer beside this one.)
void attention_mixer(LayerOps& ops, const LayerRecipe& recipe) {
  ops.project(Buffer::kNormed, Projection::kQkv, Buffer::kQkv);
  if (recipe.qkv_bias) ops.add_qkv_bias();
  if (recipe.qk_norm) ops.qk_norm();
  ops.rope();
  ops.append_kv();
  ops.attention();
}

// Dense SwiGLU MLP: kNormed -> kActivation. (MoE: a second feed-forward beside this one,
// ending in its own reduced partial sum.)
void feed_forward(LayerOps& ops) {
  ops.project(Buffer::kNormed, Projection::kGateUp, Buffer::kGateUp);
  ops.swiglu();
}

void decoder_layer(LayerOps& ops, const LayerRecipe& recipe) {
  ops.rms_norm(Norm::kInput);
  attention_mixer(ops, recipe);
  residual_projection(ops, recipe, Buffer::kAttention, Projection::kO);

  ops.rms_norm(Norm::kPost);
  feed_forward(ops);
  residual_projection(ops, recipe, Buffer::kActivation, Projection::kDown);
}

}  // namespace

LayerRecipe LayerRecipe::of(const model::ModelConfig& config, const model::ShardSpec& shard) {
  LayerRecipe recipe;
  recipe.qkv_bias = config.attention_bias;
  recipe.qk_norm = config.qk_norm;
  recipe.tensor_parallel = shard.tp > 1;
  return recipe;
}

LayerShape::LayerShape(const model::ModelConfig& config, const model::ShardSpec& shard)
    : hidden(config.hidden_size),
      head_dim(config.head_dim),
      heads(shard.heads),
      kv_heads(shard.kv_heads),
      intermediate(shard.intermediate) {}

int LayerShape::width(Buffer buffer) const {
  switch (buffer) {
    case Buffer::kHidden:
    case Buffer::kNormed:
    case Buffer::kPartial:
      return hidden;
    case Buffer::kQkv:
      return qkv_width();
    case Buffer::kAttention:
      return q_width();
    case Buffer::kGateUp:
      return 2 * intermediate;
    case Buffer::kActivation:
      return intermediate;
  }
  throw std::logic_error("LayerShape::width: unknown buffer");
}

int LayerShape::in_width(Projection projection) const {
  switch (projection) {
    case Projection::kQkv:
    case Projection::kGateUp:
      return hidden;
    case Projection::kO:
      return q_width();
    case Projection::kDown:
      return intermediate;
  }
  throw std::logic_error("LayerShape::in_width: unknown projection");
}

int LayerShape::out_width(Projection projection) const {
  switch (projection) {
    case Projection::kQkv:
      return qkv_width();
    case Projection::kGateUp:
      return 2 * intermediate;
    case Projection::kO:
    case Projection::kDown:
      return hidden;
  }
  throw std::logic_error("LayerShape::out_width: unknown projection");
}

void forward_layers(LayerOps& ops, int num_layers, const LayerRecipe& recipe) {
  for (int layer = 0; layer < num_layers; ++layer) {
    ops.select_layer(layer);
    decoder_layer(ops, recipe);
  }
}

}  // namespace pf::compute
