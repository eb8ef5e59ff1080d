// One decoder layer, written once for every backend: which ops run, in which order, and
// where the tensor-parallel all-reduce goes (Megatron: q/k/v and gate/up column parallel,
// o and down row parallel, so each block's output is a partial sum until reduced). The
// backends (compute/cpu, compute/cuda) implement LayerOps; the recipe in decoder_layer.cpp
// calls them.
//
// The ops name buffers and weights by role (enums), not by pointer: a backend's buffers
// have different types (CPU: float everywhere; CUDA: bf16 GEMM inputs, float outputs), so
// each backend maps a role to its own storage. Virtual ops rather than a template over an
// Ops type: the recipe is compiled once (MPI- and CUDA-free), reads as plain calls, and a
// dozen virtual calls per layer are nothing next to its GEMMs.
//
// A layer is two residual blocks: an attention mixer, then a feed-forward. Each ends in a
// row-parallel projection whose partial sums are reduced and added to the residual stream
// (residual_projection in the .cpp decides the order, and that with tp == 1 the backend
// may add the projection straight into the residual stream). Other architectures slot in
// there, chosen from the config in LayerRecipe, as ops of LayerOps and a branch of the
// recipe, not as another copy of the layer:
//  - MLA (DeepSeek) replaces the mixer: latent q/kv projections, the compressed KV
//    append, attention over the latent cache; it still ends in the row-parallel o.
//  - MoE replaces the feed-forward of its layers: router, top-k experts, weighted combine
//    (and a shared expert); its output is a partial sum reduced like the dense down
//    projection's, since each TP rank holds a slice of every expert.
#pragma once

#include <cstdint>
#include <vector>

#include "kvcache/paged_kv_pool.hpp"
#include "model/config.hpp"
#include "model/weights.hpp"

namespace pf::compute {

// Per-chunk buffers of a layer, by role; [tokens, width] row-major each.
enum class Buffer {
  kHidden,      // the residual stream (the caller's hidden states, float)
  kNormed,      // RMSNorm of the residual stream
  kQkv,         // fused q | k | v projection, heads of this TP rank
  kAttention,   // attention output, [tokens, heads * head_dim]
  kPartial,     // a row-parallel projection's output (a partial sum when tp > 1)
  kGateUp,      // fused gate | up projection
  kActivation,  // SwiGLU(gate, up)
};

enum class Norm { kInput, kPost };                   // the layer's two RMSNorm weights
enum class Projection { kQkv, kO, kGateUp, kDown };  // its four GEMM weights, [out, in]

// What of the layer runs, decided from the config, the TP shard and the stage's layers.
struct LayerRecipe {
  bool qkv_bias = false;          // Qwen2: q/k/v biases
  bool qk_norm = false;           // Qwen3: per-head RMSNorm of q and k before RoPE
  bool latent_attention = false;  // DeepSeek MLA instead of grouped-query attention
  bool tensor_parallel = false;   // tp > 1: o and down give partial sums, all-reduced
  bool shared_expert = false;     // MoE layers also run an always-on shared expert
  std::vector<bool> moe_layer;    // per local layer: experts (true) or the dense MLP; empty: all dense

  // `first_layer`, `num_layers`: the stage's layers (global index of the first).
  static LayerRecipe of(const model::ModelConfig& config, const model::ShardSpec& shard, int first_layer = 0,
                        int num_layers = 0);
  bool moe(int local_layer) const {
    return local_layer < static_cast<int>(moe_layer.size()) && moe_layer[static_cast<size_t>(local_layer)];
  }
};

// Widths of one TP rank's layer (per token), shared by every backend's ops and workspace.
// MLA: head_dim is the q.k width (nope + rope), kQkv holds only the queries, and the
// attention output is v_head_dim wide per head.
struct LayerShape {
  int hidden = 0, head_dim = 0, v_head_dim = 0, heads = 0, kv_heads = 0, intermediate = 0;
  bool latent = false;

  LayerShape(const model::ModelConfig& config, const model::ShardSpec& shard);
  int q_width() const { return heads * head_dim; }
  int kv_width() const { return kv_heads * head_dim; }
  int qkv_width() const { return latent ? q_width() : q_width() + 2 * kv_width(); }
  int attention_width() const { return heads * v_head_dim; }
  int width(Buffer buffer) const;
  int in_width(Projection projection) const;
  int out_width(Projection projection) const;
};

// The KV cache one stage's pool holds for `layers` local layers: K and V of this rank's KV
// heads, or for MLA one latent row (kv_lora + rope) per token, read as keys and values, whole
// on every TP rank. `element_bytes`: 4 on the CPU, 2 (bf16) on the GPU.
kv::KvShape cache_shape(const model::ModelConfig& config, const model::ShardSpec& shard, int layers, int page_size,
                        int element_bytes = 4);

// A layer's weights by role; `Layer` is a backend's weight struct (model::LayerWeights,
// cuda::DeviceLayer), whose members carry the same names.
template <class Layer>
const auto& weight_of(const Layer& layer, Norm norm) {
  return norm == Norm::kInput ? layer.input_norm : layer.post_norm;
}
template <class Layer>
const auto& weight_of(const Layer& layer, Projection projection) {
  if (projection == Projection::kQkv) return layer.qkv;
  if (projection == Projection::kO) return layer.o;
  if (projection == Projection::kGateUp) return layer.gate_up;
  return layer.down;
}

// The ops of a layer, on the chunk the backend is computing (its tokens, positions, prompt
// and hidden states are the backend's state, set before forward_layers).
class LayerOps {
 public:
  virtual ~LayerOps() = default;
  // The layer the following ops use (weights, K/V pages).
  virtual void select_layer(int layer) = 0;

  // kNormed = RMSNorm(kHidden) with the `norm` weight.
  virtual void rms_norm(Norm norm) = 0;
  // out = in . W^T for W = `projection` [out_width, in_width].
  virtual void project(Buffer in, Projection projection, Buffer out) = 0;
  // kHidden += in . W^T: a row-parallel projection that needs no reduction (tp == 1). A
  // backend may fuse the add into the GEMM.
  virtual void project_onto_residual(Buffer in, Projection projection) = 0;
  // kQkv += the q/k/v bias, per row.
  virtual void add_qkv_bias() = 0;
  // Per-head RMSNorm of the q and k heads of kQkv, in place.
  virtual void qk_norm() = 0;
  // Rotary embedding of the q and k heads of kQkv at the chunk's positions, in place.
  virtual void rope() = 0;
  // The chunk's k and v (from kQkv) into the layer's KV pages.
  virtual void append_kv() = 0;
  // kAttention = causal attention of the chunk's q over the prompt's K/V (prefix and chunk).
  virtual void attention() = 0;
  // kActivation = SiLU(gate) * up of kGateUp.
  virtual void swiglu() = 0;

  // ---- Multi-head latent attention (recipe.latent_attention) ----
  // The MLA recipe's own ops, in place of qkv/rope/append_kv/attention (so that no backend
  // branches on MLA inside the dense ops):
  // kNormed -> this rank's query heads (q_nope | q_rope) and the token's latent row
  // (normed kv_lora | k_rope).
  virtual void latent_projections() { unsupported("multi-head latent attention"); }
  // RoPE on the rope parts: the queries' q_rope and the latent rows' k_rope.
  virtual void latent_rope() { unsupported("multi-head latent attention"); }
  // The chunk's latent rows into the layer's pages (one row per token, for every head).
  virtual void append_latent() { unsupported("multi-head latent attention"); }
  // kAttention = causal attention of the chunk's queries over the latent cache (absorbed).
  virtual void latent_attention() { unsupported("multi-head latent attention"); }

  // ---- Mixture of experts (recipe.moe_layer) ----
  // Each token's top-k experts and their weights, from kNormed (every TP rank routes alike).
  virtual void route() { unsupported("mixture of experts"); }
  // kPartial = sum over the chosen experts of weight * expert(kNormed): this rank's slice.
  virtual void routed_experts() { unsupported("mixture of experts"); }
  // kPartial += [sigmoid gate *] shared_expert(kNormed): this rank's slice.
  virtual void shared_expert() { unsupported("mixture of experts"); }

  // Only rows [first, chunk's rows) are read after this layer: the ops that follow run on
  // them alone (the recipe calls it after every row's K/V are appended). False where the
  // backend computes every row anyway, which is as correct.
  virtual bool keep_rows_from(int /*first*/) { return false; }

  // Sums `buffer` in place across the TP group (only when the recipe is tensor parallel).
  virtual void all_reduce(Buffer buffer) = 0;
  // kHidden += `buffer`.
  virtual void add_to_residual(Buffer buffer) = 0;

 protected:
  // A backend without an op says so (backend_setup refuses such models before this).
  [[noreturn]] static void unsupported(const char* what);
};

// The rows of a chunk whose hidden states anyone reads after the stage's last layer:
// [first, rows). All of them but on the last stage, where without per-token products only
// the prompt's last row is read (its logits), on its last chunk, and no row on the others.
struct OutputRows {
  int first = 0, rows = 0;
  bool all() const { return first <= 0; }
};

// Every layer in turn on the backend's current chunk. The last layer attends and runs its
// feed-forward only for `output`'s rows where the backend can (LayerOps::keep_rows_from),
// once every row's K/V are in the cache: the others' results would never be read (what
// llama.cpp does with its output ids; ~1/layers of the stage's work).
void forward_layers(LayerOps& ops, int num_layers, const LayerRecipe& recipe, OutputRows output = {});

}  // namespace pf::compute
