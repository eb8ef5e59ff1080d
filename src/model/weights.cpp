// Loading a rank's slice of the weights from a tensor source.
#include "model/weights.hpp"

#include <algorithm>
#include <cmath>

#include "errors.hpp"

namespace pf::model {

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// Reads a slice; a slice holding NaN or Inf is loaded anyway but noted in `warnings`.
std::vector<float> read(const TensorSource& source, const std::string& name, int64_t row0, int64_t rows, int64_t col0,
                        int64_t cols, std::vector<std::string>& warnings) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  source.read_block(name, row0, rows, col0, cols, out.data());
  const auto bad = std::count_if(out.begin(), out.end(), [](float v) { return !std::isfinite(v); });
  if (bad > 0)
    warnings.push_back(name + " holds " + std::to_string(bad) + " NaN/Inf value(s) in this rank's slice; its logits "
                       "will likely be NaN");
  return out;
}

void append(std::vector<float>& dst, const std::vector<float>& src) {
  dst.insert(dst.end(), src.begin(), src.end());
}

}  // namespace

void validate_tensors(const ModelConfig& config, const TensorSource& source, const std::string& origin) {
  for (const auto& spec : expected_tensors(config)) {
    if (!source.has(spec.name)) throw UserError(origin + ": tensor " + spec.name + " is missing");
    const auto actual = source.shape(spec.name);
    if (actual != spec.shape)
      throw UserError(origin + ": tensor " + spec.name + " has shape " + shape_text(actual) +
                      " but config.json implies " + shape_text(spec.shape));
  }
}

void validate_tensor_parallel(const ModelConfig& c, int tp) {
  auto check = [tp](int value, const char* what) {
    if (value % tp != 0)
      throw UserError(std::string(what) + " (" + std::to_string(value) + ") does not divide by --tp " +
                      std::to_string(tp));
  };
  check(c.num_heads, "num_attention_heads");
  check(c.num_kv_heads, "num_key_value_heads");
  check(c.intermediate_size, "intermediate_size");
}

VocabSlice vocab_slice(int vocab_size, int tp, int tp_rank) {
  const int base = vocab_size / tp, extra = vocab_size % tp;
  return {tp_rank * base + std::min(tp_rank, extra), base + (tp_rank < extra ? 1 : 0)};
}

ShardSpec make_shard_spec(const ModelConfig& config, int tp, int tp_rank) {
  ShardSpec s;
  s.tp = tp;
  s.tp_rank = tp_rank;
  s.heads = config.num_heads / tp;
  s.kv_heads = config.num_kv_heads / tp;
  s.intermediate = config.intermediate_size / tp;
  const VocabSlice vocab = vocab_slice(config.vocab_size, tp, tp_rank);
  s.vocab_begin = vocab.begin;
  s.vocab_count = vocab.count;
  return s;
}

size_t StageWeights::bytes() const {
  size_t n = embedding.size() + final_norm.size() + lm_head.size();
  for (const auto& l : layers)
    n += l.input_norm.size() + l.qkv.size() + l.qkv_bias.size() + l.q_norm.size() + l.k_norm.size() + l.o.size() +
         l.post_norm.size() + l.gate_up.size() + l.down.size();
  return n * sizeof(float);
}

StageWeights load_stage_weights(const ModelConfig& c, const TensorSource& source, const StageRange& stage,
                                bool first_stage, bool last_stage, const ShardSpec& shard) {
  const int64_t h = c.hidden_size, d = c.head_dim;
  const int64_t q_rows = shard.heads * d, kv_rows = shard.kv_heads * d, inter = shard.intermediate;
  const int64_t q_row0 = shard.tp_rank * q_rows, kv_row0 = shard.tp_rank * kv_rows, i_row0 = shard.tp_rank * inter;

  StageWeights w;
  if (first_stage) w.embedding = read(source, "model.embed_tokens.weight", 0, c.vocab_size, 0, h, w.warnings);
  for (int layer = stage.first; layer < stage.first + stage.count; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    LayerWeights l;
    l.input_norm = read(source, p + "input_layernorm.weight", 0, h, 0, 1, w.warnings);
    // Column parallel: each rank owns whole heads, i.e. a contiguous block of output rows.
    l.qkv = read(source, p + "self_attn.q_proj.weight", q_row0, q_rows, 0, h, w.warnings);
    append(l.qkv, read(source, p + "self_attn.k_proj.weight", kv_row0, kv_rows, 0, h, w.warnings));
    append(l.qkv, read(source, p + "self_attn.v_proj.weight", kv_row0, kv_rows, 0, h, w.warnings));
    if (c.attention_bias) {
      l.qkv_bias = read(source, p + "self_attn.q_proj.bias", q_row0, q_rows, 0, 1, w.warnings);
      append(l.qkv_bias, read(source, p + "self_attn.k_proj.bias", kv_row0, kv_rows, 0, 1, w.warnings));
      append(l.qkv_bias, read(source, p + "self_attn.v_proj.bias", kv_row0, kv_rows, 0, 1, w.warnings));
    }
    if (c.qk_norm) {
      l.q_norm = read(source, p + "self_attn.q_norm.weight", 0, d, 0, 1, w.warnings);
      l.k_norm = read(source, p + "self_attn.k_norm.weight", 0, d, 0, 1, w.warnings);
    }
    // Row parallel: each rank owns the input columns matching its heads.
    l.o = read(source, p + "self_attn.o_proj.weight", 0, h, q_row0, q_rows, w.warnings);
    l.post_norm = read(source, p + "post_attention_layernorm.weight", 0, h, 0, 1, w.warnings);
    l.gate_up = read(source, p + "mlp.gate_proj.weight", i_row0, inter, 0, h, w.warnings);
    append(l.gate_up, read(source, p + "mlp.up_proj.weight", i_row0, inter, 0, h, w.warnings));
    l.down = read(source, p + "mlp.down_proj.weight", 0, h, i_row0, inter, w.warnings);
    w.layers.push_back(std::move(l));
  }
  if (last_stage) {
    w.final_norm = read(source, "model.norm.weight", 0, h, 0, 1, w.warnings);
    const std::string head = c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
    w.lm_head = read(source, head, shard.vocab_begin, shard.vocab_count, 0, h, w.warnings);  // vocabulary parallel
  }
  return w;
}

}  // namespace pf::model
