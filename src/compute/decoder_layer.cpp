// The decoder-layer recipe (see decoder_layer.hpp):
//   rmsnorm -> qkv projection [+ bias] [-> q/k norm] -> RoPE -> K/V into pages -> attention
//     (MLA: latent projections -> RoPE -> latent into pages -> attention over the latents)
//   -> o projection [-> all-reduce] -> residual
//   rmsnorm -> gate_up projection -> SwiGLU -> down projection [-> all-reduce] -> residual
//     (MoE: route -> routed experts [+ shared expert] [-> all-reduce] -> residual)
// The stage's last layer narrows to the rows read once the K/V are appended (OutputRows).
#include "compute/decoder_layer.hpp"

#include <stdexcept>
#include <string>

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

// Attention over the paged KV cache: kNormed -> kAttention. Grouped-query attention, or
// MLA, whose cache holds one latent row per token for every head. `output`: the rows read
// after this layer; false when none are (the layer ends once the K/V are in the cache).
bool attention_mixer(LayerOps& ops, const LayerRecipe& recipe, const OutputRows& output) {
  if (recipe.latent_attention) {
    ops.latent_projections();
    ops.latent_rope();
    ops.append_latent();
    ops.latent_attention();
    return true;
  }
  ops.project(Buffer::kNormed, Projection::kQkv, Buffer::kQkv);
  if (recipe.qkv_bias) ops.add_qkv_bias();
  if (recipe.qk_norm) ops.qk_norm();
  ops.rope();
  ops.append_kv();
  if (!output.all() && ops.keep_rows_from(output.first) && output.first >= output.rows) return false;
  ops.attention();
  return true;
}

// Dense SwiGLU MLP: kNormed -> the residual stream.
void dense_feed_forward(LayerOps& ops, const LayerRecipe& recipe) {
  ops.project(Buffer::kNormed, Projection::kGateUp, Buffer::kGateUp);
  ops.swiglu();
  residual_projection(ops, recipe, Buffer::kActivation, Projection::kDown);
}

// Mixture of experts: kNormed -> the residual stream. The experts' down projections end
// inside the op, so its partial sum is reduced here like the dense block's.
void moe_feed_forward(LayerOps& ops, const LayerRecipe& recipe) {
  ops.route();
  ops.routed_experts();
  if (recipe.shared_expert) ops.shared_expert();
  if (recipe.tensor_parallel) ops.all_reduce(Buffer::kPartial);
  ops.add_to_residual(Buffer::kPartial);
}

void decoder_layer(LayerOps& ops, const LayerRecipe& recipe, int layer, const OutputRows& output) {
  ops.rms_norm(Norm::kInput);
  if (!attention_mixer(ops, recipe, output)) return;
  residual_projection(ops, recipe, Buffer::kAttention, Projection::kO);

  ops.rms_norm(Norm::kPost);
  if (recipe.moe(layer))
    moe_feed_forward(ops, recipe);
  else
    dense_feed_forward(ops, recipe);
}

}  // namespace

void LayerOps::unsupported(const char* what) {
  throw std::logic_error(std::string("this backend has no ") + what + " ops");
}

LayerRecipe LayerRecipe::of(const model::ModelConfig& config, const model::ShardSpec& shard, int first_layer,
                            int num_layers) {
  LayerRecipe recipe;
  recipe.qkv_bias = config.attention_bias;
  recipe.qk_norm = config.qk_norm;
  recipe.latent_attention = config.is_mla();
  recipe.tensor_parallel = shard.tp > 1;
  recipe.shared_expert = config.moe.shared_intermediate > 0;
  for (int layer = first_layer; layer < first_layer + num_layers; ++layer)
    recipe.moe_layer.push_back(config.moe_layer(layer));
  return recipe;
}

LayerShape::LayerShape(const model::ModelConfig& config, const model::ShardSpec& shard)
    : hidden(config.hidden_size),
      head_dim(config.head_dim),
      v_head_dim(config.is_mla() ? config.mla.v_head_dim : config.head_dim),
      heads(shard.heads),
      kv_heads(shard.kv_heads),
      intermediate(shard.intermediate),
      latent(config.is_mla()) {}

kv::KvShape cache_shape(const model::ModelConfig& config, const model::ShardSpec& shard, int layers, int page_size,
                        int element_bytes) {
  if (config.is_mla()) return {layers, 1, config.mla.latent_width(), page_size, element_bytes, true};
  return {layers, shard.kv_heads, config.head_dim, page_size, element_bytes};
}

int LayerShape::width(Buffer buffer) const {
  switch (buffer) {
    case Buffer::kHidden:
    case Buffer::kNormed:
    case Buffer::kPartial:
      return hidden;
    case Buffer::kQkv:
      return qkv_width();
    case Buffer::kAttention:
      return attention_width();
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
      return attention_width();
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

void forward_layers(LayerOps& ops, int num_layers, const LayerRecipe& recipe, OutputRows output) {
  for (int layer = 0; layer < num_layers; ++layer) {
    ops.select_layer(layer);
    decoder_layer(ops, recipe, layer, layer == num_layers - 1 ? output : OutputRows{});
  }
}

}  // namespace pf::compute
