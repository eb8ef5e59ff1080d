// The CPU backend's stage compute and its decoder-layer ops (see cpu_stage_compute.hpp).
// Megatron TP: column-parallel q/k/v and gate/up, row-parallel o and down (the recipe in
// compute/decoder_layer.cpp reduces their partial sums).
#include "compute/cpu/cpu_stage_compute.hpp"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <random>
#include <stdexcept>

#include "compute/cp_kv_rows.hpp"
#include "compute/cpu/elementwise.hpp"
#include "compute/cpu/gemm.hpp"
#include "compute/cpu/thread_pool.hpp"
#include "compute/vocab_scores.hpp"
#include "io/bf16.hpp"
#include "model/rope_frequencies.hpp"
#include "sched/hidden_slots.hpp"

namespace pf::compute {

CpuStageCompute::CpuStageCompute(const model::ModelConfig& config, const model::ShardSpec& shard,
                                 model::StageWeights weights, kv::PagedKvPool& kv_pool, dist::TpAllReduce* all_reduce,
                                 dist::CpRing* cp_ring, sched::CpAttention cp_attention)
    : config_(config),
      shard_(shard),
      shape_(config, shard),
      recipe_(LayerRecipe::of(config, shard, weights.first_layer, static_cast<int>(weights.layers.size()))),
      weights_(std::move(weights)),
      kv_pool_(kv_pool),
      all_reduce_(all_reduce),
      inv_freq_(model::rope_inv_freq(config)),
      rope_scale_(model::rope_scale(config)),
      cp_ring_(cp_ring && cp_ring->ranks() > 1 ? cp_ring : nullptr),
      cp_attention_(cp_attention) {
  if (recipe_.tensor_parallel && !all_reduce_)
    throw std::invalid_argument("CpuStageCompute: tp > 1 needs a TP all-reduce");
  if (bf16()) store_weights_as_bf16();
}

namespace {

// `values` as bf16, the float vector released.
std::vector<uint16_t> take_as_bf16(std::vector<float>& values) {
  std::vector<uint16_t> half(values.size());
  bf16::narrow(values.data(), static_cast<int64_t>(values.size()), half.data());
  std::vector<float>().swap(values);
  return half;
}

void round_in_place(std::vector<float>& values) {
  bf16::round_all(values.data(), static_cast<int64_t>(values.size()));
}

}  // namespace

void CpuStageCompute::store_weights_as_bf16() {
  if (config_.is_moe() || config_.is_mla())  // the backend factory refuses them first
    throw std::logic_error("CpuStageCompute: --dtype bf16 covers dense models with grouped-query attention");
  for (model::LayerWeights& w : weights_.layers) {
    bf16_layers_.push_back({take_as_bf16(w.qkv), take_as_bf16(w.o), take_as_bf16(w.gate_up), take_as_bf16(w.down)});
    for (auto* small : {&w.input_norm, &w.post_norm, &w.qkv_bias, &w.q_norm, &w.k_norm}) round_in_place(*small);
  }
  bf16_embedding_ = take_as_bf16(weights_.embedding);
  bf16_lm_head_ = take_as_bf16(weights_.lm_head);
  round_in_place(weights_.final_norm);
}

void CpuStageCompute::embed(const int32_t* tokens, int count, float* hidden) {
  if (!bf16()) return cpu::embed(weights_.embedding.data(), config_.hidden_size, tokens, count, hidden);
  const int64_t h = config_.hidden_size;
  for (int t = 0; t < count; ++t) bf16::widen(bf16_embedding_.data() + tokens[t] * h, h, hidden + t * h);
}

// The decoder-layer ops (decoder_layer.hpp) of one chunk: float32 buffers of the
// workspace, OpenBLAS projections, K/V into the paged pool. With context parallelism
// (`ring` non-null) the rows are this CP rank's share of the chunk, whose K/V go to its
// shard of the cache from row `local0` on.
class CpuStageCompute::LayerOnCpu final : public LayerOps {
 public:
  LayerOnCpu(CpuStageCompute& stage, const ChunkContext& chunk, float* hidden, const cpu::RingChunk* ring = nullptr,
             int64_t local0 = 0)
      : s_(stage),
        shape_(stage.shape_),
        chunk_(chunk),
        ring_(ring),
        t_(ring ? ring->mine.rows() : chunk.tokens),
        pos0_(static_cast<int>(chunk.pos0)),
        local0_(ring ? static_cast<int>(local0) : pos0_),
        hidden_(hidden),
        eps_(static_cast<float>(stage.config_.rms_norm_eps)) {}

  void select_layer(int layer) override {
    layer_ = layer;
    w_ = &s_.weights_.layers[layer];
  }

  void rms_norm(Norm norm) override {
    const int h = shape_.hidden;
    const float* weight = weight_of(*w_, norm).data();
    float *hidden = buffer(Buffer::kHidden), *normed = buffer(Buffer::kNormed);
    cpu::parallel_rows(t_, [&](int r0, int r1) {
      cpu::rms_norm(hidden + int64_t(r0) * h, r1 - r0, h, h, weight, eps_, normed + int64_t(r0) * h, h);
    });
  }

  void project(Buffer in, Projection projection, Buffer out) override {
    const int in_width = shape_.in_width(projection), out_width = shape_.out_width(projection);
    timed(GemmOps, [&] {
      if (s_.bf16())
        cpu::linear_bf16(buffer(in), t_, in_width, weight_of(s_.bf16_layers_[layer_], projection).data(), out_width,
                         buffer(out));
      else
        cpu::linear(buffer(in), t_, in_width, weight_of(*w_, projection).data(), out_width, buffer(out));
    });
  }

  // No fusion on the CPU: the GEMM, then the add (sgemm with beta = 1 would round differently).
  void project_onto_residual(Buffer in, Projection projection) override {
    project(in, projection, Buffer::kPartial);
    add_to_residual(Buffer::kPartial);
  }

  void add_qkv_bias() override {
    cpu::bias_add(s_.qkv_.data(), t_, shape_.qkv_width(), shape_.qkv_width(), w_->qkv_bias.data());
  }

  void qk_norm() override {
    const int d = shape_.head_dim, stride = shape_.qkv_width();
    cpu::parallel_rows(t_, [&](int r0, int r1) {
      for (int row = r0; row < r1; ++row) {
        float* q_row = s_.qkv_.data() + static_cast<int64_t>(row) * stride;
        float* k_row = q_row + shape_.q_width();
        cpu::rms_norm(q_row, shape_.heads, d, d, w_->q_norm.data(), eps_, q_row, d);
        cpu::rms_norm(k_row, shape_.kv_heads, d, d, w_->k_norm.data(), eps_, k_row, d);
      }
    });
  }

  // The angles of the chunk's rows are computed once for all its layers (rope_angles).
  void rope() override {
    float* q = s_.qkv_.data();
    const int stride = shape_.qkv_width(), half = shape_.head_dim / 2;
    if (layer_ == 0) {
      s_.rope_cos_.resize(static_cast<size_t>(t_) * half);
      s_.rope_sin_.resize(static_cast<size_t>(t_) * half);
      cpu::parallel_rows(t_, [&](int r0, int r1) {
        for_position_runs(r0, r1, [&](int row, int count, int pos) {
          cpu::rope_angles(pos, count, shape_.head_dim, s_.inv_freq_, s_.rope_scale_, s_.rope_cos_.data() + row * half,
                           s_.rope_sin_.data() + row * half);
        });
      });
    }
    cpu::parallel_rows(t_, [&](int r0, int r1) {
      float* rows = q + int64_t(r0) * stride;
      const float *cos = s_.rope_cos_.data() + int64_t(r0) * half, *sin = s_.rope_sin_.data() + int64_t(r0) * half;
      cpu::apply_rope_angles(rows, r1 - r0, stride, shape_.heads, shape_.head_dim, cos, sin);
      cpu::apply_rope_angles(rows + shape_.q_width(), r1 - r0, stride, shape_.kv_heads, shape_.head_dim, cos, sin);
    });
  }

  void append_kv() override {
    const float* k = s_.qkv_.data() + shape_.q_width();
    const int stride = shape_.qkv_width();
    s_.kv_pool_.write(layer_, chunk_.prompt, local0_, t_, k, stride, k + shape_.kv_width(), stride);
  }

  // The rows before `first` are not read after this layer: the row-wise ops that follow
  // start at `first` (the cache holds every row's K/V by now, which attention reads).
  bool keep_rows_from(int first) override {
    if (!sched::last_layer_narrows(shape_.latent, ring_ != nullptr)) return false;
    first = std::min(first, t_);
    row0_ += first;
    t_ -= first;
    pos0_ += first;
    return true;
  }

  void attention() override {
    timed(AttentionOps, [&] {
      const kv::KvLayerView view{&s_.kv_pool_, layer_, &s_.kv_pool_.pages(chunk_.prompt)};
      if (ring_) {
        const float scale = 1.0f / std::sqrt(static_cast<float>(shape_.head_dim));
        cpu::GqaRingKeys keys(view, shape_.heads, scale, s_.ring_ws_.partial_ws);
        return cpu::ring_attention(s_.qkv_.data(), shape_.qkv_width(), *ring_, keys, local0_ + t_, *s_.cp_ring_,
                                   s_.attn_.data(), shape_.q_width(), s_.ring_ws_);
      }
      cpu::chunk_attention(buffer(Buffer::kQkv), shape_.qkv_width(), t_, pos0_, view, shape_.heads,
                           buffer(Buffer::kAttention), shape_.q_width(), s_.attention_ws_);
    });
  }

  void latent_projections() override {
    timed(GemmOps, [&] {
      cpu::latent_projections(s_.normed_.data(), t_, s_.config_, shape_.heads, *w_, s_.qkv_.data(), s_.latent_ws_);
    });
  }

  void latent_rope() override {
    const int64_t lw = s_.config_.mla.latent_width();
    for_position_runs(0, t_, [&](int row, int count, int pos) {
      cpu::latent_rope(s_.qkv_.data() + int64_t(row) * shape_.q_width(), count, s_.config_, shape_.heads, pos,
                       s_.inv_freq_, s_.rope_scale_, s_.latent_ws_.latent.data() + row * lw);
    });
  }

  void append_latent() override {  // one latent row per token, read as keys and values
    const int width = s_.config_.mla.latent_width();
    s_.kv_pool_.write(layer_, chunk_.prompt, local0_, t_, s_.latent_ws_.latent.data(), width, nullptr, 0);
  }

  void latent_attention() override {
    timed(AttentionOps, [&] {
      const kv::KvLayerView view{&s_.kv_pool_, layer_, &s_.kv_pool_.pages(chunk_.prompt)};
      if (ring_) {
        cpu::LatentRingKeys keys(view, s_.config_, shape_.heads, *w_, s_.latent_ws_);
        return cpu::ring_attention(s_.qkv_.data(), shape_.q_width(), *ring_, keys, local0_ + t_, *s_.cp_ring_,
                                   s_.attn_.data(), shape_.attention_width(), s_.ring_ws_);
      }
      cpu::latent_attention(s_.qkv_.data(), t_, pos0_, view, s_.config_, shape_.heads, *w_, s_.attn_.data(),
                            s_.latent_ws_);
    });
  }

  void route() override {
    cpu::route_tokens(buffer(Buffer::kNormed), t_, shape_.hidden, *w_, s_.config_.moe, s_.moe_ws_);
    const int experts = s_.config_.moe.experts;
    s_.expert_rows_.resize(s_.weights_.layers.size() * experts);
    if (row0_ > 0) return;  // a narrowed layer's few rows would read as a skewed layer: not counted
    for (int e = 0; e < experts; ++e)
      s_.expert_rows_[static_cast<size_t>(layer_) * experts + e] +=
          s_.moe_ws_.first_slot[e + 1] - s_.moe_ws_.first_slot[e];
  }

  void routed_experts() override {
    timed(GemmOps, [&] {
      cpu::routed_experts(buffer(Buffer::kNormed), t_, shape_.hidden, s_.shard_.expert_intermediate,
                          s_.shard_.expert_begin, *w_, s_.moe_ws_, buffer(Buffer::kPartial));
    });
  }

  void shared_expert() override {
    timed(GemmOps, [&] {
      cpu::shared_expert(buffer(Buffer::kNormed), t_, shape_.hidden, s_.shard_.shared_intermediate, *w_, s_.moe_ws_,
                         buffer(Buffer::kPartial));
    });
  }

  void swiglu() override {
    const int64_t width = shape_.intermediate;
    const float* gate_up = buffer(Buffer::kGateUp);
    float* act = buffer(Buffer::kActivation);
    cpu::parallel_rows(t_, [&](int r0, int r1) {
      cpu::swiglu(gate_up + 2 * width * r0, r1 - r0, shape_.intermediate, act + width * r0);
    });
  }

  void all_reduce(Buffer role) override { s_.all_reduce_->sum(buffer(role), t_ * shape_.width(role)); }

  void add_to_residual(Buffer role) override {
    const int64_t width = shape_.width(role);
    const float* y = buffer(role);
    float* hidden = buffer(Buffer::kHidden);
    cpu::parallel_rows(
        t_, [&](int r0, int r1) { cpu::add_inplace(hidden + width * r0, y + width * r0, width * (r1 - r0)); });
  }

 private:
  enum OpKind { AttentionOps, GemmOps };
  // fn(first row, rows, position of the first) for each run of consecutive positions among
  // rows [r0, r1): one run, or with CP up to two (the rank's two pieces of the chunk).
  template <typename Fn>
  void for_position_runs(int r0, int r1, Fn&& fn) const {
    if (!ring_) return fn(r0, r1 - r0, pos0_ + r0);
    const sched::CpShare& share = ring_->mine;
    const int split = share.first.count;
    if (r0 < split) fn(r0, std::min(r1, split) - r0, static_cast<int>(share.first.pos) + r0);
    if (r1 > split) {
      const int from = std::max(r0, split);
      fn(from, r1 - from, static_cast<int>(share.second.pos) + (from - split));
    }
  }

  // Runs op() and adds its seconds and counted FLOPs to the stage's op times.
  template <typename Op>
  void timed(OpKind kind, Op&& op) {
    const double flops0 = cpu::counted_gemm_flops();
    const auto t0 = std::chrono::steady_clock::now();
    op();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double flops = cpu::counted_gemm_flops() - flops0;
    OpTimes& times = s_.op_times_;
    (kind == AttentionOps ? times.attention_s : times.gemm_s) += seconds;
    (kind == AttentionOps ? times.attention_flops : times.gemm_flops) += flops;
  }

  // `role`'s rows from the first one computed (row0_) on.
  float* buffer(Buffer role) { return base(role) + static_cast<int64_t>(row0_) * shape_.width(role); }
  float* base(Buffer role) {
    switch (role) {
      case Buffer::kHidden:
        return hidden_;
      case Buffer::kNormed:
        return s_.normed_.data();
      case Buffer::kQkv:
        return s_.qkv_.data();
      case Buffer::kAttention:
        return s_.attn_.data();
      case Buffer::kPartial:
        return s_.proj_.data();
      case Buffer::kGateUp:
        return s_.gate_up_.data();
      case Buffer::kActivation:
        return s_.act_.data();
    }
    throw std::logic_error("CpuStageCompute: unknown buffer");
  }

  CpuStageCompute& s_;
  const LayerShape& shape_;
  const ChunkContext& chunk_;
  const cpu::RingChunk* const ring_;
  int t_, pos0_;  // rows computed (from row0_ on) and the position of the first
  int row0_ = 0;
  const int local0_;
  float* const hidden_;
  const float eps_;
  int layer_ = 0;
  const model::LayerWeights* w_ = nullptr;
};

void CpuStageCompute::forward(const ChunkContext& chunk, float* hidden) {
  std::optional<cpu::RingChunk> ring;
  int64_t local0 = 0;
  if (cp_ring_) {  // this rank's share of the chunk; every rank's rows of the prompt so far
    const int ranks = cp_ring_->ranks();
    std::vector<std::vector<sched::RowRun>>& rows = cp_rows_[chunk.prompt];
    rows.resize(static_cast<size_t>(ranks));
    local0 = sched::rows_in(rows[static_cast<size_t>(cp_ring_->rank())]);
    sched::append_shares(rows, chunk.pos0, chunk.tokens);
    ring.emplace();
    ring->mine = sched::cp_share(chunk.pos0, chunk.tokens, ranks, cp_ring_->rank());
    ring->rows = &rows;
    ring->start = chunk.pos0;
    ring->tokens = chunk.tokens;
    ring->variant = sched::cp_attention_for_chunk(cp_attention_, chunk.pos0, chunk.tokens, ranks, cp_widths());
    const long long layers = static_cast<long long>(weights_.layers.size());
    (ring->variant == sched::CpAttention::kPassQ ? cp_counts_.pass_q_steps : cp_counts_.pass_kv_steps) += layers;
  }
  const int64_t t = ring ? ring->mine.rows() : chunk.tokens;
  normed_.resize(t * shape_.width(Buffer::kNormed));
  qkv_.resize(t * shape_.width(Buffer::kQkv));
  attn_.resize(t * shape_.width(Buffer::kAttention));
  proj_.resize(t * shape_.width(Buffer::kPartial));
  gate_up_.resize(t * shape_.width(Buffer::kGateUp));
  act_.resize(t * shape_.width(Buffer::kActivation));
  if (ring && local0 % kv_pool_.shape().page_size != 0 && t > 0)  // a prefix's shared, partly filled page
    kv_pool_.privatize_page_of(chunk.prompt, local0);
  kv_pool_.reserve(chunk.prompt, ring ? local0 + t : chunk.pos0 + chunk.tokens);
  const auto t0 = std::chrono::steady_clock::now();
  const double lent0 = cpu::ThreadPool::instance().lent_seconds();
  LayerOnCpu ops(*this, chunk, hidden, ring ? &*ring : nullptr, local0);
  forward_layers(ops, static_cast<int>(weights_.layers.size()), recipe_, {chunk.first_output_row, chunk.tokens});
  if (cp_ring_) cp_counts_.bytes_sent = cp_ring_->bytes_sent();
  op_times_.forward_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  op_times_.lent_s += cpu::ThreadPool::instance().lent_seconds() - lent0;
}

void CpuStageCompute::final_norm(const float* hidden, int rows, float* normed) {
  const int h = config_.hidden_size;
  cpu::rms_norm(hidden, rows, h, h, weights_.final_norm.data(), static_cast<float>(config_.rms_norm_eps), normed, h);
}

void CpuStageCompute::lm_head(const float* hidden_row, float* logits_shard) {
  const int h = config_.hidden_size;
  std::vector<float> normed(h);
  final_norm(hidden_row, 1, normed.data());
  if (bf16()) return cpu::linear_bf16(normed.data(), 1, h, bf16_lm_head_.data(), shard_.vocab_count, logits_shard);
  cblas_sgemv(CblasRowMajor, CblasNoTrans, shard_.vocab_count, h, 1.0f, weights_.lm_head.data(), h, normed.data(), 1,
              0.0f, logits_shard, 1);
}

void CpuStageCompute::summarize_vocab_rows(const float* hidden, int rows, const int32_t* targets,
                                           const SummaryShape& shape, std::byte* records) {
  const int h = config_.hidden_size, vocab = shard_.vocab_count;
  head_normed_.resize(static_cast<size_t>(rows) * h);
  head_logits_.resize(static_cast<size_t>(rows) * vocab);
  final_norm(hidden, rows, head_normed_.data());
  if (bf16())
    cpu::linear_bf16(head_normed_.data(), rows, h, bf16_lm_head_.data(), vocab, head_logits_.data());
  else
    cpu::linear(head_normed_.data(), rows, h, weights_.lm_head.data(), vocab, head_logits_.data());
  const size_t record_bytes = compute::row_summary_bytes(shape);
  cpu::parallel_rows(rows, [&](int r0, int r1) {
    for (int r = r0; r < r1; ++r)
      compute::summarize_row_slice(head_logits_.data() + static_cast<size_t>(r) * vocab, vocab, shard_.vocab_begin,
                                   targets[r], shape, records + r * record_bytes);
  });
}

namespace {

// Calls `copy(layer, page, head, in_page, at, n)` for each run of n values of one head inside one
// page, positions [pos0, pos0 + count): `in_page` is the run's first value in the page's head
// block, `at` its offset in the caller's [layers][kv_heads][count][head_dim] block.
template <typename Copy>
void for_each_page_run(const kv::PagedKvPool& pool, const std::vector<int>& pages, int64_t pos0, int count, Copy copy) {
  const kv::KvShape& shape = pool.shape();
  const size_t d = static_cast<size_t>(shape.head_dim);
  for (int layer = 0; layer < shape.layers; ++layer)
    for (int head = 0; head < shape.kv_heads; ++head) {
      const size_t out = (static_cast<size_t>(layer) * shape.kv_heads + head) * count * d;
      for (int64_t p = pos0; p < pos0 + count;) {
        const int page = pages.at(static_cast<size_t>(p / shape.page_size));
        const int64_t in_page = p % shape.page_size;
        const int64_t run = std::min<int64_t>(shape.page_size - in_page, pos0 + count - p);
        copy(layer, page, head, in_page * d, out + static_cast<size_t>(p - pos0) * d, run * d);
        p += run;
      }
    }
}

}  // namespace

void CpuStageCompute::share_prefix(int source, int dest, int64_t tokens) {
  if (!cp_ring_) return kv_pool_.share(source, dest, tokens);
  // With CP, this rank's rows of the prefix are those of its runs before `tokens`: the pages
  // holding them are shared, the last one perhaps partly filled, which the heir copies before
  // it writes its own rows there (forward: privatize_page_of). Copied then, not now: a
  // document's many heirs all take it over at once, and each holds a copy only while it runs.
  std::vector<std::vector<sched::RowRun>> heir = sched::runs_before(cp_rows_.at(source), tokens);
  const int64_t rows = sched::rows_in(heir[static_cast<size_t>(cp_ring_->rank())]);
  cp_rows_[dest] = std::move(heir);
  const int page = kv_pool_.shape().page_size;
  kv_pool_.share(source, dest, (rows + page - 1) / page * page);
}

void CpuStageCompute::read_kv(int prompt, int64_t pos0, int count, float* keys, float* values) const {
  if (cp_ring_) return read_kv_of_cp_group(prompt, pos0, count, keys, values);
  const bool latent = kv_pool_.shape().latent;  // one row per token: the keys
  for_each_page_run(kv_pool_, kv_pool_.pages(prompt), pos0, count,
                    [&](int layer, int page, int head, size_t in_page, size_t at, size_t n) {
                      kv_pool_.load_rows(layer, page, head, false, in_page, n, keys + at);
                      if (!latent) kv_pool_.load_rows(layer, page, head, true, in_page, n, values + at);
                    });
}

// With CP a prompt's rows are spread over the group (compute/cp_kv_rows.hpp): collective.
void CpuStageCompute::read_kv_of_cp_group(int prompt, int64_t pos0, int count, float* keys, float* values) const {
  read_cp_group_rows(
      cp_rows_.at(prompt), *cp_ring_, kv_pool_.shape(), pos0, count,
      [&](int64_t row0, int n, float* k, float* v) {
        for_each_page_run(kv_pool_, kv_pool_.pages(prompt), row0, n,
                          [&](int layer, int page, int head, size_t in_page, size_t at, size_t run) {
                            kv_pool_.load_rows(layer, page, head, false, in_page, run, k + at);
                            if (v) kv_pool_.load_rows(layer, page, head, true, in_page, run, v + at);
                          });
      },
      keys, values);
}

void CpuStageCompute::write_kv(int prompt, int64_t pos0, int count, const float* keys, const float* values) {
  if (cp_ring_) return write_kv_share(prompt, pos0, count, keys, values);
  store_rows(prompt, pos0, count, keys, values);
}

// Rows in read_kv's layout into the prompt's cache rows [row0, row0 + count).
void CpuStageCompute::store_rows(int prompt, int64_t row0, int count, const float* keys, const float* values) {
  const bool latent = kv_pool_.shape().latent;
  kv_pool_.reserve(prompt, row0 + count);
  for_each_page_run(kv_pool_, kv_pool_.pages(prompt), row0, count,
                    [&](int layer, int page, int head, size_t in_page, size_t at, size_t n) {
                      kv_pool_.store_rows(layer, page, head, false, in_page, n, keys + at);
                      if (!latent) kv_pool_.store_rows(layer, page, head, true, in_page, n, values + at);
                    });
}

// With CP every rank is handed all the rows and keeps its share (compute/cp_kv_rows.hpp).
// The caller hands ranges of a multiple of 2 * ranks tokens (but the last), so that a long
// prefix is spread evenly (sched::cp_load_piece).
void CpuStageCompute::write_kv_share(int prompt, int64_t pos0, int count, const float* keys, const float* values) {
  std::vector<std::vector<sched::RowRun>>& rows = cp_rows_[prompt];
  rows.resize(static_cast<size_t>(cp_ring_->ranks()));
  write_cp_share(rows, cp_ring_->rank(), kv_pool_.shape(), pos0, count, keys, values,
                 [&](int64_t row0, int n, const float* k, const float* v) {
                   if (row0 % kv_pool_.shape().page_size != 0)
                     kv_pool_.privatize_page_of(prompt, row0);  // (a shared, partly filled page)
                   store_rows(prompt, row0, n, k, v);
                 });
}

void CpuStageCompute::gather_cp_rows(float* state, int64_t start, int length, int rows) {
  const int ranks = cp_ring_->ranks(), me = cp_ring_->rank();
  const int64_t h = config_.hidden_size, first = start + length - rows;
  std::vector<int64_t> counts = sched::cp_rows_from(start, length, ranks, first);
  for (int64_t& count : counts) count *= h;                                   // (in floats)
  const int64_t mine = sched::cp_share(start, length, ranks, me).rows() * h;  // the last counts[me] of them
  std::vector<float> all(me == 0 ? static_cast<size_t>(rows * h) : 0);
  cp_ring_->gather_to_first(state + (mine - counts[static_cast<size_t>(me)]), counts, all.data());
  if (me != 0) return;  // (rank 0's slot is only read above, before it is written below)
  const float* from = all.data();
  for (int j = 0; j < ranks; ++j) {  // rank j's rows read, of its two pieces, into their places
    const sched::CpShare theirs = sched::cp_share(start, length, ranks, j).from(first);
    for (const sched::RowRun& run : {theirs.first, theirs.second}) {
      std::copy(from, from + run.count * h, state + (run.pos - first) * h);
      from += run.count * h;
    }
  }
}

sched::CpWidths CpuStageCompute::cp_widths() const {
  if (!config_.is_mla()) return sched::CpWidths::grouped_query(shape_.heads, shape_.kv_heads, shape_.head_dim);
  return sched::CpWidths::latent(shape_.heads, config_.mla.latent_width(), shape_.head_dim, shape_.v_head_dim);
}

int64_t CpuStageCompute::capacity_tokens() const {
  const int64_t held = static_cast<int64_t>(kv_pool_.num_pages()) * kv_pool_.shape().page_size;
  if (!cp_ring_) return held;
  // With CP a rank holds its share of a profiled prefix (cut as one chunk) and chunk: at most
  // two rows more than 1/ranks of each.
  return std::max<int64_t>(0, held - 4) * cp_ring_->ranks();
}

void CpuStageCompute::prepare_prefix(int prompt, int64_t prefix, int tokens) {
  if (cp_ring_) {  // this rank's share of the prefix, cut as one chunk; the chunk is forward()'s
    const int ranks = cp_ring_->ranks();
    std::vector<std::vector<sched::RowRun>>& rows = cp_rows_[prompt];
    rows.assign(static_cast<size_t>(ranks), {});
    sched::append_shares(rows, 0, static_cast<int>(prefix));
    const int64_t local = sched::cp_share(0, static_cast<int>(prefix), ranks, cp_ring_->rank()).rows();
    const int64_t next = sched::cp_share(prefix, tokens, ranks, cp_ring_->rank()).rows();
    return fill_random_rows(prompt, local, local + next);
  }
  fill_random_rows(prompt, prefix, prefix + tokens);
}

void CpuStageCompute::fill_random_rows(int prompt, int64_t rows, int64_t room) {
  kv_pool_.reserve(prompt, room);
  const kv::KvShape& shape = kv_pool_.shape();
  const int kv_width = shape.kv_heads * shape.head_dim;
  constexpr int kBlock = 4096;
  std::mt19937 rng(static_cast<uint32_t>(rows));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values;
  for (int64_t start = 0; start < rows; start += kBlock) {
    const int count = static_cast<int>(std::min<int64_t>(kBlock, rows - start));
    values.resize(static_cast<size_t>(count) * kv_width);
    for (auto& v : values) v = uniform(rng);
    for (int layer = 0; layer < shape.layers; ++layer)
      kv_pool_.write(layer, prompt, static_cast<int>(start), count, values.data(), kv_width, values.data(), kv_width);
  }
}

}  // namespace pf::compute
