// Loading a rank's slice of the weights from a tensor source.
#include "model/weights.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <set>

#include "compute/cpu/thread_pool.hpp"
#include "errors.hpp"
#include "model/tensor_names.hpp"
#include "model/weights_digest.hpp"

namespace pf::model {

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// Reads a slice and digests it (the weights' identity covers every value a rank computes
// with, model/weights_digest.hpp). A slice holding NaN or Inf is loaded anyway but noted in
// the record's warnings; routing tensors refuse it (require_finite).
// Fused tensors (q|k|v, gate|up) are read in place behind what `out` holds: the caller
// reserves their whole size first, so no part is copied or reallocated (an 8B model's
// weights are tens of GB; every extra pass over fresh memory costs seconds of page faults).
// A large slice is read by the rank's threads (cpu::ThreadPool, as many as rank_threads.hpp
// gives it), each a band of rows: reading, converting, digesting and checking are per value,
// and a digest is a sum over values, so the bands' sums add up to the whole slice's.
void read_append(std::vector<float>& out, const TensorSource& source, const std::string& name, int64_t row0,
                 int64_t rows, int64_t col0, int64_t cols, LoadRecord& record) {
  constexpr int64_t kValuesPerBand = int64_t{1} << 18;  // 1 MiB of floats: far above a task's cost
  // First, on this thread: a checkpoint opens its files on a tensor's first use.
  const std::vector<int64_t> shape = source.shape(name);
  int64_t tensor_cols = 1;  // the 2-D view read_block uses: [shape[0], the rest]
  for (size_t d = 1; d < shape.size(); ++d) tensor_cols *= shape[d];
  const size_t at = out.size(), count = static_cast<size_t>(rows * cols);
  out.resize(at + count);
  float* values = out.data() + at;
  cpu::ThreadPool& pool = cpu::ThreadPool::instance();
  const int64_t most = std::max<int64_t>(1, std::min<int64_t>(rows, pool.threads()));
  const int bands = static_cast<int>(std::clamp<int64_t>(rows * cols / kValuesPerBand, 1, most));
  std::vector<uint64_t> sums(bands, 0);
  std::vector<int64_t> bad_in(bands, 0);
  pool.run(bands, [&](int band, int) {
    const int64_t first = rows * band / bands, last = rows * (band + 1) / bands;
    float* v = values + first * cols;
    source.read_block(name, row0 + first, last - first, col0, cols, v);
    sums[band] = digest_block(name, row0 + first, last - first, col0, cols, tensor_cols, v).sum;
    bad_in[band] = std::count_if(v, v + (last - first) * cols, [](float x) { return !std::isfinite(x); });
  });
  record.digests.push_back({name, row0, rows, col0, cols, std::accumulate(sums.begin(), sums.end(), uint64_t{0})});
  const int64_t bad = std::accumulate(bad_in.begin(), bad_in.end(), int64_t{0});
  if (bad > 0)
    record.warnings.push_back(name + " holds " + std::to_string(bad) +
                              " NaN/Inf value(s) in this rank's slice; its "
                              "logits will likely be NaN");
}

std::vector<float> read(const TensorSource& source, const std::string& name, int64_t row0, int64_t rows, int64_t col0,
                        int64_t cols, LoadRecord& record) {
  std::vector<float> out;
  read_append(out, source, name, row0, rows, col0, cols, record);
  return out;
}

// A router's weights and bias decide which experts a token goes to: a NaN there makes the
// choice meaningless (finite but wrong logits), so it is refused rather than warned about.
void require_finite(const std::vector<float>& values, const std::string& name) {
  const auto bad = std::count_if(values.begin(), values.end(), [](float v) { return !std::isfinite(v); });
  if (bad > 0)
    throw UserError(name + " holds " + std::to_string(bad) +
                    " NaN/Inf value(s): the router would choose experts by them; the checkpoint is damaged");
}

}  // namespace

namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// What pipefill may leave unread: an FP8 weight's scale (read with its weight), an old
// checkpoint's rotary inv_freq buffer (recomputed).
bool skipped_silently(const std::string& name, const std::set<std::string>& expected) {
  if (expected.count(name) || ends_with(name, "rotary_emb.inv_freq")) return true;
  return ends_with(name, "_scale_inv") && expected.count(name.substr(0, name.size() - 10));
}

}  // namespace

std::string validate_tensors(const ModelConfig& config, const TensorSource& source, const std::string& origin) {
  source.check_storage();
  std::set<std::string> expected;
  for (const auto& spec : expected_tensors(config)) {
    if (!source.has(spec.name)) throw UserError(origin + ": tensor " + spec.name + " is missing");
    const auto actual = source.shape(spec.name);
    if (actual != spec.shape)
      throw UserError(origin + ": tensor " + spec.name + " has shape " + shape_text(actual) +
                      " but config.json implies " + shape_text(spec.shape));
    expected.insert(spec.name);
  }
  // A tensor of one of the model's layers that pipefill does not read is refused: a bias or a
  // projection the config leaves out of the layer changes its output. Layers past
  // num_hidden_layers (DeepSeek's multi-token prediction layer) are not the model's, and
  // tensors outside the layers (an lm_head.bias) none of its families has: transformers skips
  // both, and so does pipefill, saying so.
  std::vector<std::string> outside;
  int past_first = -1, past_last = -1;
  long long past_tensors = 0;
  for (const auto& name : source.names()) {
    if (skipped_silently(name, expected)) continue;
    int layer = -1;
    if (std::sscanf(name.c_str(), "model.layers.%d.", &layer) == 1 && layer >= 0) {
      if (layer < config.num_layers)
        throw UserError(origin + ": tensor " + name + " is in the checkpoint but not in the " +
                        config.architecture_name +
                        " layer pipefill computes from this config.json (a bias or a projection it would leave out); "
                        "check the config (attention_bias, mlp_bias, ...) against the weights");
      past_first = past_first < 0 ? layer : std::min(past_first, layer);
      past_last = std::max(past_last, layer);
      ++past_tensors;
      continue;
    }
    outside.push_back(name);
  }
  std::string note;
  if (past_tensors > 0)
    note += std::to_string(past_tensors) + " tensor(s) of layer(s) " + std::to_string(past_first) +
            (past_last > past_first ? "-" + std::to_string(past_last) : "") + " past num_hidden_layers " +
            std::to_string(config.num_layers) + " (DeepSeek's multi-token prediction layer is one such)";
  if (!outside.empty()) {
    note += std::string(note.empty() ? "" : "; ") + std::to_string(outside.size()) +
            " outside the model's layers and head: ";
    for (size_t i = 0; i < std::min<size_t>(outside.size(), 4); ++i) note += (i ? ", " : "") + outside[i];
    if (outside.size() > 4) note += ", ...";
  }
  if (note.empty()) return note;
  return origin + " holds tensors pipefill does not read, as transformers does not: " + note +
         "; if config.json should describe them, the results are not that model's";
}

namespace {

// The widths --tp must divide, with the config.json field each comes from.
std::vector<std::pair<const char*, int>> tp_divided_widths(const ModelShape& s, ExpertSplit split) {
  std::vector<std::pair<const char*, int>> widths = {{"num_attention_heads", s.num_heads}};
  if (!s.mla()) widths.push_back({"num_key_value_heads", s.num_kv_heads});
  bool dense_layer = !s.moe();
  for (int layer = 0; layer < s.num_layers; ++layer) dense_layer = dense_layer || !s.moe_layer(layer);
  if (dense_layer) widths.push_back({"intermediate_size", s.intermediate_size});
  if (s.moe() && split == ExpertSplit::kExperts) widths.push_back({"the number of routed experts", s.experts});
  if (s.moe()) {
    if (split == ExpertSplit::kWidth)
      widths.push_back(
          {s.name == "MixtralForCausalLM" ? "intermediate_size (each expert's width)" : "moe_intermediate_size",
           s.moe_intermediate_size});
    if (s.shared_expert_intermediate_size > 0)
      widths.push_back({"the shared expert's width", s.shared_expert_intermediate_size});
  }
  return widths;
}

}  // namespace

ExpertSplit parse_expert_split(const std::string& text) {
  if (text == "width") return ExpertSplit::kWidth;
  if (text == "experts") return ExpertSplit::kExperts;
  throw UserError("--expert-split " + text +
                  " is unknown (width: a slice of every expert per TP rank; experts: "
                  "whole experts per TP rank)");
}

const char* expert_split_name(ExpertSplit split) {
  return split == ExpertSplit::kWidth ? "width" : "experts";
}

bool tensor_parallel_divides(const ModelShape& shape, int tp, ExpertSplit split) {
  const auto widths = tp_divided_widths(shape, split);
  return std::all_of(widths.begin(), widths.end(), [tp](const auto& width) { return width.second % tp == 0; });
}

void validate_tensor_parallel(const ModelShape& shape, int tp, ExpertSplit split) {
  const auto widths = tp_divided_widths(shape, split);
  int common = 0;
  for (const auto& [name, value] : widths) common = std::gcd(common, value);
  for (const auto& [name, value] : widths) {
    if (value % tp == 0) continue;
    std::string allowed;
    for (int d = 1; d <= common; ++d)
      if (common % d == 0) allowed += (allowed.empty() ? "" : ", ") + std::to_string(d);
    throw UserError(std::string(name) + " (" + std::to_string(value) + ") does not divide by --tp " +
                    std::to_string(tp) + "; the TP sizes this model allows: " + allowed);
  }
}

VocabSlice vocab_slice(int vocab_size, int tp, int tp_rank) {
  const int base = vocab_size / tp, extra = vocab_size % tp;
  return {tp_rank * base + std::min(tp_rank, extra), base + (tp_rank < extra ? 1 : 0)};
}

ShardSpec make_shard_spec(const ModelConfig& config, int tp, int tp_rank, ExpertSplit split) {
  ShardSpec s;
  s.tp = tp;
  s.tp_rank = tp_rank;
  s.heads = config.num_heads / tp;
  s.kv_heads = config.num_kv_heads / tp;
  s.intermediate = config.intermediate_size / tp;
  const bool whole = split == ExpertSplit::kExperts;
  s.expert_count = whole ? config.moe.experts / tp : config.moe.experts;
  s.expert_begin = whole ? tp_rank * s.expert_count : 0;
  s.expert_intermediate = whole ? config.moe.intermediate : config.moe.intermediate / tp;
  s.expert_slice = whole ? 0 : tp_rank;
  s.shared_intermediate = config.moe.shared_intermediate / tp;
  if (config.is_mla()) s.kv_heads = 1;  // the latent, replicated on every TP rank
  const VocabSlice vocab = vocab_slice(config.vocab_size, tp, tp_rank);
  s.vocab_begin = vocab.begin;
  s.vocab_count = vocab.count;
  return s;
}

size_t StageWeights::bytes() const {
  size_t n = embedding.size() + final_norm.size() + lm_head.size();
  for (const auto& l : layers) {
    n += l.input_norm.size() + l.qkv.size() + l.qkv_bias.size() + l.q_norm.size() + l.k_norm.size() + l.o.size() +
         l.post_norm.size() + l.gate_up.size() + l.down.size();
    n += l.q_a.size() + l.q_a_norm.size() + l.q_b.size() + l.kv_a.size() + l.kv_a_norm.size() + l.kv_b.size();
    n += l.router.size() + l.router_bias.size() + l.shared.gate_up.size() + l.shared.down.size() + l.shared_gate.size();
    for (const auto& e : l.experts) n += e.gate_up.size() + e.down.size();
  }
  return n * sizeof(float);
}

namespace {

// A SwiGLU block of `width` columns, this rank's slice [rank * width, (rank + 1) * width).
SwigluWeights read_swiglu(const TensorSource& source, const SwigluNames& names, int64_t h, int64_t width, int slice,
                          LoadRecord& record) {
  const int64_t row0 = slice * width;
  SwigluWeights w;
  w.gate_up.reserve(static_cast<size_t>(2 * width * h));
  read_append(w.gate_up, source, names.gate, row0, width, 0, h, record);
  read_append(w.gate_up, source, names.up, row0, width, 0, h, record);
  w.down = read(source, names.down, 0, h, row0, width, record);
  return w;
}

// DeepSeek's interleaved rope pairs (x0, x1), (x2, x3)...: transformers rotates them into
// [evens rotated | odds rotated], which equals rotate-half RoPE on the evens-then-odds
// permutation of the input. Permuting the producing rows once here lets every backend use
// its rotate-half kernel, and the cache holds the rope key as transformers' cache does.
void deinterleave_rows(std::vector<float>& rows, int64_t first_row, int64_t count, int64_t cols) {
  std::vector<float> original(rows.begin() + first_row * cols, rows.begin() + (first_row + count) * cols);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t from = i < count / 2 ? 2 * i : 2 * (i - count / 2) + 1;
    std::copy_n(original.begin() + from * cols, cols, rows.begin() + (first_row + i) * cols);
  }
}

void load_latent_attention(const ModelConfig& c, const TensorSource& source, const LayerTensorNames& n,
                           const ShardSpec& shard, LayerWeights& l, LoadRecord& record) {
  const MlaConfig& m = c.mla;
  const int64_t h = c.hidden_size, qk = c.head_dim, heads = shard.heads, head0 = shard.tp_rank * heads;
  int64_t q_in = h;
  if (m.q_lora_rank > 0) {
    q_in = m.q_lora_rank;
    l.q_a = read(source, n("self_attn.q_a_proj.weight"), 0, q_in, 0, h, record);
    l.q_a_norm = read(source, n("self_attn.q_a_layernorm.weight"), 0, q_in, 0, 1, record);
    l.q_b = read(source, n("self_attn.q_b_proj.weight"), head0 * qk, heads * qk, 0, q_in, record);
  } else {
    l.q_b = read(source, n("self_attn.q_proj.weight"), head0 * qk, heads * qk, 0, h, record);
  }
  l.kv_a = read(source, n("self_attn.kv_a_proj_with_mqa.weight"), 0, m.latent_width(), 0, h, record);
  l.kv_a_norm = read(source, n("self_attn.kv_a_layernorm.weight"), 0, m.kv_lora_rank, 0, 1, record);
  const int64_t kv_b_rows = m.qk_nope_head_dim + m.v_head_dim;
  l.kv_b =
      read(source, n("self_attn.kv_b_proj.weight"), head0 * kv_b_rows, heads * kv_b_rows, 0, m.kv_lora_rank, record);
  l.o = read(source, n("self_attn.o_proj.weight"), 0, h, head0 * m.v_head_dim, heads * m.v_head_dim, record);
  if (m.rope_interleave) {
    for (int64_t head = 0; head < heads; ++head)
      deinterleave_rows(l.q_b, head * qk + m.qk_nope_head_dim, m.qk_rope_head_dim, q_in);
    deinterleave_rows(l.kv_a, m.kv_lora_rank, m.qk_rope_head_dim, h);
  }
}

void load_attention(const ModelConfig& c, const TensorSource& source, const LayerTensorNames& n, const ShardSpec& shard,
                    LayerWeights& l, LoadRecord& record) {
  const int64_t h = c.hidden_size, d = c.head_dim;
  const int64_t q_rows = shard.heads * d, kv_rows = shard.kv_heads * d;
  const int64_t q_row0 = shard.tp_rank * q_rows, kv_row0 = shard.tp_rank * kv_rows;
  // Column parallel: each rank owns whole heads, i.e. a contiguous block of output rows.
  l.qkv.reserve(static_cast<size_t>((q_rows + 2 * kv_rows) * h));
  read_append(l.qkv, source, n("self_attn.q_proj.weight"), q_row0, q_rows, 0, h, record);
  read_append(l.qkv, source, n("self_attn.k_proj.weight"), kv_row0, kv_rows, 0, h, record);
  read_append(l.qkv, source, n("self_attn.v_proj.weight"), kv_row0, kv_rows, 0, h, record);
  if (c.attention_bias) {
    read_append(l.qkv_bias, source, n("self_attn.q_proj.bias"), q_row0, q_rows, 0, 1, record);
    read_append(l.qkv_bias, source, n("self_attn.k_proj.bias"), kv_row0, kv_rows, 0, 1, record);
    read_append(l.qkv_bias, source, n("self_attn.v_proj.bias"), kv_row0, kv_rows, 0, 1, record);
  }
  if (c.qk_norm) {
    l.q_norm = read(source, n("self_attn.q_norm.weight"), 0, d, 0, 1, record);
    l.k_norm = read(source, n("self_attn.k_norm.weight"), 0, d, 0, 1, record);
  }
  // Row parallel: each rank owns the input columns matching its heads.
  l.o = read(source, n("self_attn.o_proj.weight"), 0, h, q_row0, q_rows, record);
}

void load_experts(const ModelConfig& c, const TensorSource& source, const LayerTensorNames& n, const ShardSpec& shard,
                  LayerWeights& l, LoadRecord& record) {
  const int64_t h = c.hidden_size;
  const MoeConfig& m = c.moe;
  l.router = read(source, n.router(), 0, m.experts, 0, h, record);  // replicated: every rank routes
  require_finite(l.router, n.router());
  if (m.score_correction_bias) {
    l.router_bias = read(source, n.router_correction_bias(), 0, m.experts, 0, 1, record);
    require_finite(l.router_bias, n.router_correction_bias());
  }
  for (int e = shard.expert_begin; e < shard.expert_begin + shard.expert_count; ++e)
    l.experts.push_back(read_swiglu(source, n.expert(e), h, shard.expert_intermediate, shard.expert_slice, record));
  if (m.shared_intermediate > 0)
    l.shared = read_swiglu(source, n.shared_expert(), h, shard.shared_intermediate, shard.tp_rank, record);
  if (m.shared_expert_gate) l.shared_gate = read(source, n.shared_expert_gate(), 0, 1, 0, h, record);
}

}  // namespace

StageWeights load_stage_weights(const ModelConfig& c, const TensorSource& source, const StageRange& stage,
                                bool first_stage, bool last_stage, const ShardSpec& shard,
                                const LayerSink& take_layer) {
  const int64_t h = c.hidden_size;
  StageWeights w;
  w.first_layer = stage.first;
  if (first_stage) {
    w.embedding = read(source, "model.embed_tokens.weight", 0, c.vocab_size, 0, h, w.record);
    // A tied LM head reads TP vocabulary slices of the same tensor on the last stage: digested
    // here slice by slice too, the same blocks are then compared across the ranks that read
    // them (weights_digest.hpp), and the sum is the same.
    if (c.tie_word_embeddings && shard.tp > 1) {
      w.record.digests.pop_back();
      for (int rank = 0; rank < shard.tp; ++rank) {
        const VocabSlice slice = vocab_slice(c.vocab_size, shard.tp, rank);
        w.record.digests.push_back(digest_block("model.embed_tokens.weight", slice.begin, slice.count, 0, h, h,
                                                w.embedding.data() + static_cast<size_t>(slice.begin) * h));
      }
    }
  }
  for (int layer = stage.first; layer < stage.first + stage.count; ++layer) {
    const LayerTensorNames n(c, layer);
    LayerWeights l;
    l.input_norm = read(source, n("input_layernorm.weight"), 0, h, 0, 1, w.record);
    if (c.is_mla())
      load_latent_attention(c, source, n, shard, l, w.record);
    else
      load_attention(c, source, n, shard, l, w.record);
    l.post_norm = read(source, n("post_attention_layernorm.weight"), 0, h, 0, 1, w.record);
    if (c.moe_layer(layer)) {
      load_experts(c, source, n, shard, l, w.record);
    } else {
      SwigluWeights mlp = read_swiglu(source, n.dense_mlp(), h, shard.intermediate, shard.tp_rank, w.record);
      l.gate_up = std::move(mlp.gate_up);
      l.down = std::move(mlp.down);
    }
    if (take_layer)
      take_layer(std::move(l));
    else
      w.layers.push_back(std::move(l));
  }
  if (last_stage) {
    w.final_norm = read(source, "model.norm.weight", 0, h, 0, 1, w.record);
    const std::string head = c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
    w.lm_head = read(source, head, shard.vocab_begin, shard.vocab_count, 0, h, w.record);  // vocabulary parallel
  }
  return w;
}

}  // namespace pf::model
