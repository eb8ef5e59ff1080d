// The CUDA stage compute (see cuda_stage_compute.hpp): set-up, the chunk's uploads and
// timing around the layer recipe (compute/decoder_layer.cpp), the recipe's ops as cuBLASLt
// GEMMs and kernels/ launches, and the LM head.
#include "compute/cuda/cuda_stage_compute.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <thread>

#include "compute/cp_kv_rows.hpp"
#include "compute/cpu/elementwise.hpp"  // rms_norm: the final norm of --hidden-states rows on the host
#include "compute/vocab_scores.hpp"
#include "io/safetensors.hpp"
#include "model/rope_frequencies.hpp"
#include "sched/hidden_slots.hpp"

namespace pf::cuda {
namespace {

constexpr int kStagingSlots = 8;

// Polls with short naps: other ranks may share the host, and a core spinning in
// cudaEventSynchronize would slow them.
void nap_until(const std::function<bool()>& ready) {
  for (int spins = 0; !ready(); ++spins)
    if (spins > 100) std::this_thread::sleep_for(std::chrono::microseconds(50));
}

}  // namespace

CudaStageCompute::CudaStageCompute(const model::ModelConfig& config, const model::ShardSpec& shard,
                                   DeviceWeights weights, int page_size, int max_chunk_tokens, cudaStream_t forward,
                                   dist::TpAllReduce* all_reduce, dist::CpRing* cp_ring, dist::CpRing* host_cp_ring,
                                   sched::CpAttention cp_attention)
    : config_(config),
      shard_(shard),
      shape_(config, shard),
      recipe_(compute::LayerRecipe::of(config, shard, weights.first_layer, static_cast<int>(weights.layers.size()))),
      weights_(std::move(weights)),
      page_size_(page_size),
      forward_stream_(forward ? forward : create_forward_stream()),
      all_reduce_(all_reduce),
      rope_scale_(model::rope_scale(config)),
      cp_ring_(cp_ring && cp_ring->ranks() > 1 ? cp_ring : nullptr),
      host_cp_ring_(host_cp_ring),
      cp_attention_(cp_attention) {
  if (recipe_.tensor_parallel && !all_reduce_)
    fail("pipefill", "CudaStageCompute", "tp > 1 needs a TP all-reduce", __FILE__, __LINE__);
  if (config_.is_moe())
    moe_ = std::make_unique<MoeOnGpu>(config_, shard_, [this](cudaEvent_t event) { wait_event(event); });
  if (config_.is_mla()) latent_ = std::make_unique<LatentOnGpu>(config_, shard_);
  if (cp_ring_)
    ring_ = std::make_unique<RingOnGpu>(
        *cp_ring_, forward_stream_,
        [this](void* device, const void* host, size_t bytes) { upload_async(device, host, bytes); });
  CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&forward_done_, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&drained_, cudaEventDisableTiming));
  inv_freq_.upload(model::rope_inv_freq(config_));
  // A CP rank computes its share of each chunk only (forward() grows it should a chunk need more).
  ensure_workspace(cp_ring_ ? sched::cp_most_rows(max_chunk_tokens, cp_ring_->ranks()) : max_chunk_tokens);
  if (shard_.vocab_count > 0) {
    logits_.ensure(shard_.vocab_count);
    CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&logits_host_), sizeof(float) * shard_.vocab_count));
  }
  staging_.resize(kStagingSlots);
  for (auto& slot : staging_) CUDA_CHECK(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming));
}

void CudaStageCompute::copy_to_host_after_forward(const std::function<void(cudaStream_t)>& enqueue) const {
  // The copy stream takes the data off the device once the forward stream's work so far is
  // done; the forward stream goes on meanwhile.
  CUDA_CHECK(cudaEventRecord(forward_done_, forward_stream_));
  CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, forward_done_, 0));
  enqueue(copy_stream_);
  CUDA_CHECK(cudaEventRecord(copied_, copy_stream_));
  wait_event(copied_);
}

void CudaStageCompute::wait_event(cudaEvent_t event) const {
  const std::function<bool()> ready = [event] { return event_done(event); };
  if (waiter_)
    waiter_(ready);
  else
    nap_until(ready);
}

CudaStageCompute::~CudaStageCompute() {
  cudaStreamSynchronize(forward_stream_);
  cudaStreamSynchronize(copy_stream_);
  for (auto& slot : staging_) {
    if (slot.host) cudaFreeHost(slot.host);
    cudaEventDestroy(slot.done);
  }
  for (auto& span : spans_) {
    cudaEventDestroy(span.start);
    cudaEventDestroy(span.end);
  }
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  if (clock_origin_) cudaEventDestroy(clock_origin_);
  if (logits_host_) cudaFreeHost(logits_host_);
  cudaEventDestroy(forward_done_);
  cudaEventDestroy(copied_);
  cudaEventDestroy(drained_);
  cudaStreamDestroy(copy_stream_);
  cudaStreamDestroy(forward_stream_);
}

cudaStream_t CudaStageCompute::create_forward_stream() {
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return stream;
}

int64_t CudaStageCompute::free_device_bytes() {
  size_t free_bytes = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  return static_cast<int64_t>(free_bytes);
}

void CudaStageCompute::reserve_cp_ring(int64_t shard_rows, int max_chunk_tokens) {
  if (ring_) ring_->reserve(shard_rows, max_chunk_tokens, kv_shape(), shape_.heads, ring_value_width());
}

kv::KvShape CudaStageCompute::kv_shape() const {
  return compute::cache_shape(config_, shard_, static_cast<int>(weights_.layers.size()), page_size_, sizeof(bf16));
}

void CudaStageCompute::allocate_kv(int num_pages) {
  const kv::KvShape shape = kv_shape();
  pages_ = std::make_unique<kv::PageTable>(num_pages, page_size_);
  kv_storage_ = DeviceArray<bf16>(static_cast<size_t>(num_pages) * shape.layers * shape.floats_per_page_layer());
  page_table_ = DeviceArray<int32_t>(std::max(num_pages, 1));
}

void CudaStageCompute::ensure_workspace(int tokens) {
  if (tokens <= workspace_tokens_) return;  // (growing a DeviceArray waits for queued work)
  const size_t t = tokens;
  normed_.ensure(t * shape_.width(compute::Buffer::kNormed));
  qkv_.ensure(t * shape_.width(compute::Buffer::kQkv));
  attn_.ensure(t * shape_.width(compute::Buffer::kAttention));
  proj_.ensure(t * shape_.width(compute::Buffer::kPartial));
  bool dense_layer = false;  // a stage of MoE layers only has no dense MLP to hold
  for (int layer = 0; layer < static_cast<int>(weights_.layers.size()); ++layer)
    dense_layer = dense_layer || !recipe_.moe(layer);
  if (dense_layer) {
    gate_up_.ensure(t * shape_.width(compute::Buffer::kGateUp));
    act_.ensure(t * shape_.width(compute::Buffer::kActivation));
  }
  if (moe_) moe_->reserve(tokens);
  if (latent_) latent_->reserve(tokens);
  workspace_tokens_ = tokens;
}

void CudaStageCompute::upload_async(void* device, const void* host, size_t bytes) {
  if (bytes == 0) return;
  Staging& slot = staging_[next_staging_++ % staging_.size()];
  wait_event(slot.done);  // its previous copy has run (never recorded: returns at once)
  if (slot.bytes < bytes) {
    if (slot.host) CUDA_CHECK(cudaFreeHost(slot.host));
    CUDA_CHECK(cudaMallocHost(&slot.host, bytes));
    slot.bytes = bytes;
  }
  std::memcpy(slot.host, host, bytes);
  CUDA_CHECK(cudaMemcpyAsync(device, slot.host, bytes, cudaMemcpyHostToDevice, forward_stream_));
  CUDA_CHECK(cudaEventRecord(slot.done, forward_stream_));
}

void CudaStageCompute::upload_page_table(int prompt) {
  const std::vector<int>& table = pages_->pages(prompt);
  static_assert(sizeof(int) == sizeof(int32_t), "page ids are int32 on the device");
  upload_async(page_table_.data(), table.data(), table.size() * sizeof(int32_t));
}

void CudaStageCompute::embed(const int32_t* tokens, int count, float* hidden) {
  tokens_.ensure(std::max(count, 1));
  upload_async(tokens_.data(), tokens, sizeof(int32_t) * count);
  kernels::embedding_gather(weights_.embedding.data(), config_.hidden_size, tokens_.data(), count, hidden,
                            forward_stream_);
  CUDA_CHECK_LAUNCH();
}

cudaEvent_t CudaStageCompute::take_event() {
  if (!free_events_.empty()) {
    cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  cudaEvent_t e;
  CUDA_CHECK(cudaEventCreate(&e));
  return e;
}

// The decoder-layer ops (decoder_layer.hpp) of one chunk, enqueued on the forward stream:
// cuBLASLt GEMMs read bf16 buffers and write float ones; kernels/ do the rest.
class CudaStageCompute::LayerOnGpu final : public compute::LayerOps {
 public:
  // With CP (`ring`), the rows are this rank's share of the chunk and its K/V go to the cache
  // from row `local0` on; else the chunk's tokens at their positions.
  LayerOnGpu(CudaStageCompute& stage, const compute::ChunkContext& chunk, float* hidden, int rows, int64_t local0,
             const cpu::RingChunk* ring)
      : g_(stage),
        shape_(stage.shape_),
        chunk_(chunk),
        t_(rows),
        local0_(local0),
        ring_(ring),
        hidden_(hidden),
        stream_(stage.forward_stream_),
        eps_(static_cast<float>(stage.config_.rms_norm_eps)) {
    kv_.base = stage.kv_storage_.data();
    kv_.page_table = stage.page_table_.data();
    const kv::KvShape shape = stage.kv_shape();
    kv_.layers = shape.layers;
    kv_.kv_heads = shape.kv_heads;
    kv_.head_dim = shape.head_dim;
    kv_.page_size = shape.page_size;
    kv_.latent = shape.latent;
  }

  void select_layer(int layer) override {
    layer_ = layer;
    w_ = &g_.weights_.layers[layer];
  }

  void rms_norm(compute::Norm norm) override {
    const int h = shape_.hidden;
    kernels::rms_norm_rows(float_buffer(compute::Buffer::kHidden), t_, h, h, compute::weight_of(*w_, norm).data(), eps_,
                           gemm_input(compute::Buffer::kNormed), h, stream_);
  }

  void project(compute::Buffer in, compute::Projection projection, compute::Buffer out) override {
    g_.gemm_.linear(gemm_input(in), t_, shape_.in_width(projection), compute::weight_of(*w_, projection).data(),
                    shape_.out_width(projection), float_buffer(out), stream_);
  }

  // The GEMM adds into the residual stream itself (beta = 1).
  void project_onto_residual(compute::Buffer in, compute::Projection projection) override {
    g_.gemm_.linear(gemm_input(in), t_, shape_.in_width(projection), compute::weight_of(*w_, projection).data(),
                    shape_.out_width(projection), float_buffer(compute::Buffer::kHidden), stream_, /*beta=*/1.0f);
  }

  void add_qkv_bias() override {
    const int width = shape_.qkv_width();
    kernels::bias_add(g_.qkv_.data(), t_, width, width, w_->qkv_bias.data(), stream_);
  }

  void qk_norm() override {
    float* q = g_.qkv_.data();
    const int t = t_, d = shape_.head_dim, stride = shape_.qkv_width();
    kernels::rms_norm_heads(q, t, shape_.heads, d, stride, w_->q_norm.data(), eps_, stream_);
    kernels::rms_norm_heads(q + shape_.q_width(), t, shape_.kv_heads, d, stride, w_->k_norm.data(), eps_, stream_);
  }

  // The q and k heads in one launch (with CP, one a piece: each at its own positions).
  void rope() override {
    const auto rope_rows = [&](int row, int count, int64_t pos) {
      if (count == 0) return;
      kernels::rope(g_.qkv_.data() + static_cast<int64_t>(row) * shape_.qkv_width(), count, shape_.qkv_width(),
                    shape_.heads, shape_.kv_heads, shape_.q_width(), shape_.head_dim, pos, g_.inv_freq_.data(),
                    g_.rope_scale_, stream_);
    };
    if (!ring_) return rope_rows(0, t_, chunk_.pos0);
    rope_rows(0, ring_->mine.first.count, ring_->mine.first.pos);
    rope_rows(ring_->mine.first.count, ring_->mine.second.count, ring_->mine.second.pos);
  }

  void append_kv() override {
    const float* k = g_.qkv_.data() + shape_.q_width();
    kernels::kv_append(kv_, layer_, local0_, t_, k, k + shape_.kv_width(), shape_.qkv_width(), stream_);
  }

  // The rows before `first` are not read after this layer: the row-wise ops that follow
  // start at `first` (the cache holds every row's K/V by now, which attention reads).
  bool keep_rows_from(int first) override {
    if (!sched::last_layer_narrows(shape_.latent, ring_ != nullptr)) return false;
    first = std::min(first, t_);
    row0_ += first;
    t_ -= first;
    return true;
  }

  void attention() override {
    if (ring_) {
      const float scale = 1.0f / std::sqrt(static_cast<float>(shape_.head_dim));
      const float* out = g_.ring_->attend(g_.qkv_.data(), shape_.qkv_width(), kv_, layer_, local0_ + t_, shape_.heads,
                                          shape_.head_dim, scale);
      kernels::float_to_bf16(out, g_.attn_.data(), static_cast<int64_t>(t_) * shape_.q_width(), stream_);
      CUDA_CHECK_LAUNCH();
      return;
    }
    kernels::AttentionArgs args;
    args.q = float_buffer(compute::Buffer::kQkv);
    args.q_stride = shape_.qkv_width();
    args.tokens = t_;
    args.pos0 = chunk_.pos0 + row0_;
    args.heads = shape_.heads;
    args.kv = kv_;
    args.layer = layer_;
    args.out = gemm_input(compute::Buffer::kAttention);
    args.out_stride = shape_.q_width();
    kernels::chunk_attention(args, stream_);
    CUDA_CHECK_LAUNCH();
  }

  void swiglu() override {
    kernels::swiglu(float_buffer(compute::Buffer::kGateUp), t_, shape_.intermediate,
                    gemm_input(compute::Buffer::kActivation), stream_);
  }

  // The query heads into kQkv, the latent rows kept by LatentOnGpu.
  void latent_projections() override {
    g_.latent_->projections(g_.normed_.data(), t_, *w_, g_.gemm_, g_.qkv_.data(), stream_);
  }

  // The queries' rope parts and the latent rows' rope keys (with CP, each piece at its own
  // positions).
  void latent_rope() override {
    const auto rope_rows = [&](int row, int count, int64_t pos) {
      if (count > 0) g_.latent_->rope(g_.qkv_.data(), row, count, pos, g_.inv_freq_.data(), g_.rope_scale_, stream_);
    };
    if (!ring_) return rope_rows(0, t_, chunk_.pos0);
    rope_rows(0, ring_->mine.first.count, ring_->mine.first.pos);
    rope_rows(ring_->mine.first.count, ring_->mine.second.count, ring_->mine.second.pos);
  }

  void append_latent() override { g_.latent_->append(kv_, layer_, local0_, t_, stream_); }

  void latent_attention() override {
    g_.latent_->attention(g_.qkv_.data(), t_, chunk_.pos0, kv_, layer_, *w_, g_.gemm_, g_.attn_.data(), stream_,
                          ring_ ? g_.ring_.get() : nullptr, local0_ + t_);
  }

  void route() override { g_.moe_->route(gemm_input(compute::Buffer::kNormed), t_, *w_, stream_); }

  void routed_experts() override {
    const size_t experts = static_cast<size_t>(g_.config_.moe.experts);
    g_.expert_rows_.resize(g_.weights_.layers.size() * experts);
    // A narrowed layer's few rows would read as a skewed layer: counted aside, not kept.
    std::vector<int64_t> narrowed(row0_ > 0 ? experts : 0);
    g_.moe_->routed_experts(gemm_input(compute::Buffer::kNormed), t_, *w_, g_.gemm_,
                            float_buffer(compute::Buffer::kPartial),
                            row0_ > 0 ? narrowed.data() : g_.expert_rows_.data() + layer_ * experts, stream_);
  }

  void shared_expert() override {
    g_.moe_->shared_expert(gemm_input(compute::Buffer::kNormed), t_, *w_, g_.gemm_,
                           float_buffer(compute::Buffer::kPartial), stream_);
  }

  void all_reduce(compute::Buffer role) override { g_.all_reduce_->sum(float_buffer(role), t_ * shape_.width(role)); }

  void add_to_residual(compute::Buffer role) override {
    kernels::residual_add(float_buffer(compute::Buffer::kHidden), float_buffer(role),
                          static_cast<int64_t>(t_) * shape_.width(role), stream_);
  }

 private:
  // `role`'s rows from the first one computed (row0_) on.
  bf16* gemm_input(compute::Buffer role) { return bf16_base(role) + static_cast<int64_t>(row0_) * shape_.width(role); }
  float* float_buffer(compute::Buffer role) {
    return float_base(role) + static_cast<int64_t>(row0_) * shape_.width(role);
  }

  bf16* bf16_base(compute::Buffer role) {
    switch (role) {
      case compute::Buffer::kNormed:
        return g_.normed_.data();
      case compute::Buffer::kAttention:
        return g_.attn_.data();
      case compute::Buffer::kActivation:
        return g_.act_.data();
      default:
        fail("pipefill", "CudaStageCompute", "a GEMM input that is not a bf16 buffer", __FILE__, __LINE__);
    }
  }

  float* float_base(compute::Buffer role) {
    switch (role) {
      case compute::Buffer::kHidden:
        return hidden_;
      case compute::Buffer::kQkv:
        return g_.qkv_.data();
      case compute::Buffer::kPartial:
        return g_.proj_.data();
      case compute::Buffer::kGateUp:
        return g_.gate_up_.data();
      default:
        fail("pipefill", "CudaStageCompute", "not a float buffer", __FILE__, __LINE__);
    }
  }

  CudaStageCompute& g_;
  const compute::LayerShape& shape_;
  const compute::ChunkContext& chunk_;
  int t_;  // rows computed here (from row0_ on)
  int row0_ = 0;
  const int64_t local0_;        // the cache row of the first
  const cpu::RingChunk* ring_;  // CP: this rank's share, every rank's rows
  float* const hidden_;
  const cudaStream_t stream_;
  const float eps_;
  kernels::PagedKv kv_;  // this prompt's pages (the page table uploaded for the chunk)
  int layer_ = 0;
  const DeviceLayer* w_ = nullptr;
};

void CudaStageCompute::forward(const compute::ChunkContext& chunk, float* hidden) {
  if (!pages_) fail("pipefill", "CudaStageCompute::forward", "allocate_kv() was not called", __FILE__, __LINE__);
  std::optional<cpu::RingChunk> ring;
  int64_t local0 = chunk.pos0;
  int rows = chunk.tokens;
  if (cp_ring_) {
    ring.emplace();
    begin_cp_chunk(chunk, *ring, local0);
    rows = ring->mine.rows();
  }
  ensure_workspace(std::max(rows, 1));
  pages_->reserve(chunk.prompt, local0 + rows);
  if (ring && local0 % page_size_ != 0 && rows > 0) privatize_page_of(chunk.prompt, local0);
  upload_page_table(chunk.prompt);
  if (ring) ring_->begin_chunk(*ring);
  const bool timed = clock_origin_ != nullptr && chunk.micro_batch >= 0;
  PendingSpan span{chunk.micro_batch, nullptr, nullptr};
  if (timed) {
    span.start = take_event();
    span.end = take_event();
    CUDA_CHECK(cudaEventRecord(span.start, forward_stream_));
  }
  LayerOnGpu ops(*this, chunk, hidden, rows, local0, ring ? &*ring : nullptr);
  compute::forward_layers(ops, static_cast<int>(weights_.layers.size()), recipe_,
                          {chunk.first_output_row, chunk.tokens});
  CUDA_CHECK_LAUNCH();
  if (cp_ring_) cp_counts_.bytes_sent = cp_ring_->bytes_sent();
  if (timed) {
    CUDA_CHECK(cudaEventRecord(span.end, forward_stream_));
    spans_.push_back(span);
  }
}

void CudaStageCompute::lm_head(const float* hidden_row, float* logits_shard) {
  const int h = config_.hidden_size;
  kernels::rms_norm_rows(hidden_row, 1, h, h, weights_.final_norm.data(), static_cast<float>(config_.rms_norm_eps),
                         normed_.data(), h, forward_stream_);
  gemm_.linear(normed_.data(), 1, h, weights_.lm_head.data(), shard_.vocab_count, logits_.data(), forward_stream_);
  CUDA_CHECK_LAUNCH();
  copy_to_host_after_forward([&](cudaStream_t copy) {
    CUDA_CHECK(cudaMemcpyAsync(logits_host_, logits_.data(), sizeof(float) * shard_.vocab_count, cudaMemcpyDeviceToHost,
                               copy));
  });
  std::memcpy(logits_shard, logits_host_, sizeof(float) * shard_.vocab_count);
}

void CudaStageCompute::summarize_vocab_rows(const float* hidden, int rows, const int32_t* targets,
                                            const compute::SummaryShape& shape, std::byte* records) {
  const int h = config_.hidden_size, vocab = shard_.vocab_count;
  const size_t record_bytes = compute::row_summary_bytes(shape);
  // The token set is the run's, the same at every call: uploaded once (again if it changed).
  if (!std::equal(shape.token_set, shape.token_set + shape.set_size, row_set_host_.begin(), row_set_host_.end())) {
    row_set_host_.assign(shape.token_set, shape.token_set + shape.set_size);
    row_set_.ensure(row_set_host_.size());
    upload_async(row_set_.data(), row_set_host_.data(), sizeof(int32_t) * row_set_host_.size());
  }
  const int block = std::max(1, std::min(rows, static_cast<int>((size_t{64} << 20) / (sizeof(float) * vocab))));
  ensure_workspace(block);
  row_logits_.ensure(static_cast<size_t>(block) * vocab);
  row_targets_.ensure(static_cast<size_t>(rows));
  row_summaries_.ensure(rows * record_bytes);
  upload_async(row_targets_.data(), targets, sizeof(int32_t) * rows);
  for (int first = 0; first < rows; first += block) {  // the logits buffer is reused in stream order
    const int n = std::min(block, rows - first);
    kernels::rms_norm_rows(hidden + static_cast<int64_t>(first) * h, n, h, h, weights_.final_norm.data(),
                           static_cast<float>(config_.rms_norm_eps), normed_.data(), h, forward_stream_);
    gemm_.linear(normed_.data(), n, h, weights_.lm_head.data(), vocab, row_logits_.data(), forward_stream_);
    kernels::vocab_summaries(row_logits_.data(), n, vocab, shard_.vocab_begin, row_targets_.data() + first, shape.top_k,
                             row_set_.data(), shape.set_size, row_summaries_.data() + first * record_bytes,
                             forward_stream_);
    CUDA_CHECK_LAUNCH();
  }
  copy_to_host_after_forward([&](cudaStream_t copy) {
    CUDA_CHECK(cudaMemcpyAsync(records, row_summaries_.data(), rows * record_bytes, cudaMemcpyDeviceToHost, copy));
  });
}

void CudaStageCompute::final_norm(const float* hidden, int rows, float* normed) {
  const int h = config_.hidden_size;
  if (final_norm_host_.empty()) {  // once: the weight, widened exactly from its bf16
    std::vector<uint16_t> bits(h);
    CUDA_CHECK(cudaMemcpy(bits.data(), weights_.final_norm.data(), sizeof(bf16) * h, cudaMemcpyDeviceToHost));
    final_norm_host_.resize(h);
    for (int i = 0; i < h; ++i) final_norm_host_[i] = io::bf16_to_float(bits[i]);
  }
  hidden_host_.resize(static_cast<size_t>(rows) * h);
  copy_to_host_after_forward([&](cudaStream_t copy) {
    CUDA_CHECK(cudaMemcpyAsync(hidden_host_.data(), hidden, sizeof(float) * hidden_host_.size(), cudaMemcpyDeviceToHost,
                               copy));
  });
  cpu::rms_norm(hidden_host_.data(), rows, h, h, final_norm_host_.data(), static_cast<float>(config_.rms_norm_eps),
                normed, h);
}

void CudaStageCompute::finish_prompt(int prompt) {
  // Later kernels that reuse these pages run after this prompt's, in stream order.
  if (pages_) pages_->release(prompt);
  cp_rows_.erase(prompt);
}

void CudaStageCompute::prepare_prefix(int prompt, int64_t prefix, int tokens) {
  if (cp_ring_) {  // this rank's share of the prefix, cut as one chunk; the chunk is forward()'s
    const int ranks = cp_ring_->ranks(), me = cp_ring_->rank();
    std::vector<std::vector<sched::RowRun>>& rows = cp_rows_[prompt];
    rows.assign(static_cast<size_t>(ranks), {});
    sched::append_shares(rows, 0, static_cast<int>(prefix));
    const int64_t local = sched::cp_share(0, static_cast<int>(prefix), ranks, me).rows();
    const int next = sched::cp_share(prefix, tokens, ranks, me).rows();
    prefix = local;
    tokens = next;
  }
  pages_->reserve(prompt, prefix + tokens);
  // Attention's cost does not depend on the values; random, never zeros or garbage.
  kernels::fill_uniform_bf16(kv_storage_.data(), static_cast<int64_t>(kv_storage_.size()),
                             static_cast<uint64_t>(prefix) + 1, 1.0f, forward_stream_);
  CUDA_CHECK_LAUNCH();
}

int64_t CudaStageCompute::capacity_tokens() const {
  const int64_t held = pages_ ? static_cast<int64_t>(pages_->num_pages()) * page_size_ : 0;
  if (!cp_ring_) return held;
  // With CP a rank holds its share of a profiled prefix (cut as one chunk) and chunk: at most
  // two rows more than 1/ranks of each.
  return std::max<int64_t>(0, held - 4) * cp_ring_->ranks();
}

void CudaStageCompute::begin_cp_chunk(const compute::ChunkContext& chunk, cpu::RingChunk& ring, int64_t& local0) {
  const int ranks = cp_ring_->ranks(), me = cp_ring_->rank();
  std::vector<std::vector<sched::RowRun>>& rows = cp_rows_[chunk.prompt];
  rows.resize(static_cast<size_t>(ranks));
  local0 = sched::rows_in(rows[static_cast<size_t>(me)]);
  sched::append_shares(rows, chunk.pos0, chunk.tokens);
  ring.mine = sched::cp_share(chunk.pos0, chunk.tokens, ranks, me);
  ring.rows = &rows;
  ring.start = chunk.pos0;
  ring.tokens = chunk.tokens;
  ring.variant = sched::cp_attention_for_chunk(cp_attention_, chunk.pos0, chunk.tokens, ranks, cp_widths());
  const long long layers = static_cast<long long>(weights_.layers.size());
  (ring.variant == sched::CpAttention::kPassQ ? cp_counts_.pass_q_steps : cp_counts_.pass_kv_steps) += layers;
}

sched::CpWidths CudaStageCompute::cp_widths() const {
  // The ring moves the bf16 cache: 2 bytes an element, half a float's.
  if (!config_.is_mla()) return sched::CpWidths::grouped_query(shape_.heads, shape_.kv_heads, shape_.head_dim, 2);
  // MLA in the absorbed form (latent_on_gpu.hpp), unlike the cpu backend's expanded one.
  return sched::CpWidths::absorbed_latent(shape_.heads, config_.mla.latent_width(), config_.mla.kv_lora_rank);
}

int CudaStageCompute::ring_value_width() const {
  return config_.is_mla() ? config_.mla.kv_lora_rank : shape_.head_dim;
}

void CudaStageCompute::privatize_page_of(int prompt, int64_t row) {
  const auto [old, fresh] = pages_->privatize(prompt, static_cast<size_t>(row / page_size_));
  if (old == fresh) return;
  const kv::KvShape shape = kv_shape();
  const int64_t page_elements = shape.layers * shape.floats_per_page_layer();  // (every layer's rows of the page)
  CUDA_CHECK(cudaMemcpyAsync(kv_storage_.data() + fresh * page_elements, kv_storage_.data() + old * page_elements,
                             sizeof(bf16) * page_elements, cudaMemcpyDeviceToDevice, forward_stream_));
}

void CudaStageCompute::share_prefix(int source, int dest, int64_t tokens) {
  if (!cp_ring_) return pages_->share(source, dest, tokens);
  // With CP, this rank's rows of the prefix are those of its runs before `tokens`: the pages
  // holding them are shared, the last perhaps partly filled (forward copies it first).
  std::vector<std::vector<sched::RowRun>> heir = sched::runs_before(cp_rows_.at(source), tokens);
  const int64_t rows = sched::rows_in(heir[static_cast<size_t>(cp_ring_->rank())]);
  cp_rows_[dest] = std::move(heir);
  pages_->share(source, dest, (rows + page_size_ - 1) / page_size_ * page_size_);
}

// The last stage's CP ranks' rows read to CP rank 0, into the front of its slot (device).
void CudaStageCompute::gather_cp_rows(float* state, int64_t start, int length, int rows) {
  const int ranks = cp_ring_->ranks(), me = cp_ring_->rank();
  const int64_t h = config_.hidden_size, first = start + length - rows;
  std::vector<int64_t> counts = sched::cp_rows_from(start, length, ranks, first);
  for (int64_t& count : counts) count *= h;                                   // (in floats)
  const int64_t mine = sched::cp_share(start, length, ranks, me).rows() * h;  // the last counts[me] of them
  cp_gathered_.ensure(me == 0 ? std::max<int64_t>(rows * h, 1) : 1);
  cp_ring_->gather_to_first(state + (mine - counts[static_cast<size_t>(me)]), counts, cp_gathered_.data());
  if (me != 0) return;
  int64_t from = 0;
  for (int j = 0; j < ranks; ++j) {
    const sched::CpShare theirs = sched::cp_share(start, length, ranks, j).from(first);
    for (const sched::RowRun& run : {theirs.first, theirs.second}) {
      if (run.count > 0)
        CUDA_CHECK(cudaMemcpyAsync(state + (run.pos - first) * h, cp_gathered_.data() + from,
                                   sizeof(float) * run.count * h, cudaMemcpyDeviceToDevice, forward_stream_));
      from += run.count * h;
    }
  }
}

void CudaStageCompute::synchronize() {
  for (cudaStream_t stream : {forward_stream_, copy_stream_}) {
    CUDA_CHECK(cudaEventRecord(drained_, stream));
    wait_event(drained_);
  }
}

void CudaStageCompute::align_clock(double host_now_s) {
  synchronize();
  if (!clock_origin_) CUDA_CHECK(cudaEventCreate(&clock_origin_));
  CUDA_CHECK(cudaEventRecord(clock_origin_, forward_stream_));
  CUDA_CHECK(cudaEventSynchronize(clock_origin_));
  clock_origin_s_ = host_now_s;
}

namespace {

// Visits the rows [pos0, pos0 + count) of a prompt page by page: fn(page index in the table,
// first slot in the page, row offset in the chunk, rows).
template <typename Fn>
void for_each_page_run(int page_size, int64_t pos0, int count, Fn fn) {
  for (int64_t pos = pos0; pos < pos0 + count;) {
    const int64_t slot = pos % page_size;
    const int rows = static_cast<int>(std::min<int64_t>(page_size - slot, pos0 + count - pos));
    fn(static_cast<int>(pos / page_size), static_cast<int>(slot), static_cast<int>(pos - pos0), rows);
    pos += rows;
  }
}

}  // namespace

// The pages are copied whole (a page holds every local layer: [layer][K heads | V heads]) on
// the copy stream once the forward stream's appends are done, then converted on the host.
void CudaStageCompute::read_kv(int prompt, int64_t pos0, int count, float* keys, float* values) const {
  if (!cp_ring_) return read_rows(prompt, pos0, count, keys, values);
  // With CP the prompt's rows are spread over the group: gathered to CP rank 0 on the host.
  compute::read_cp_group_rows(
      cp_rows_.at(prompt), *host_cp_ring_, kv_shape(), pos0, count,
      [&](int64_t row0, int n, float* k, float* v) { read_rows(prompt, row0, n, k, v); }, keys, values);
}

void CudaStageCompute::read_rows(int prompt, int64_t pos0, int count, float* keys, float* values) const {
  const kv::KvShape shape = kv_shape();
  const std::vector<int>& pages = pages_->pages(prompt);
  const int64_t page_elements = shape.layers * shape.floats_per_page_layer();
  const int64_t d = shape.head_dim, layer_elements = shape.floats_per_page_layer();
  const int first = static_cast<int>(pos0 / shape.page_size);
  const int last = static_cast<int>((pos0 + count - 1) / shape.page_size);
  kv_host_.resize(static_cast<size_t>(last - first + 1) * page_elements);
  copy_to_host_after_forward([&](cudaStream_t copy) {  // after the chunk's appends
    for (int p = first; p <= last; ++p)
      CUDA_CHECK(cudaMemcpyAsync(kv_host_.data() + (p - first) * page_elements,
                                 kv_storage_.data() + static_cast<int64_t>(pages.at(p)) * page_elements,
                                 sizeof(bf16) * page_elements, cudaMemcpyDeviceToHost, copy));
  });
  for_each_page_run(shape.page_size, pos0, count, [&](int p, int slot, int row, int rows) {
    const uint16_t* page = kv_host_.data() + (p - first) * page_elements;
    for (int layer = 0; layer < shape.layers; ++layer)
      for (int head = 0; head < shape.kv_heads; ++head) {
        const uint16_t* k = page + layer * layer_elements + (head * shape.page_size + slot) * d;
        const uint16_t* v = k + layer_elements / 2;
        const int64_t at = ((static_cast<int64_t>(layer) * shape.kv_heads + head) * count + row) * d;
        for (int64_t i = 0; i < rows * d; ++i) keys[at + i] = io::bf16_to_float(k[i]);
        if (!shape.latent)  // a latent cache's one row per token is the keys
          for (int64_t i = 0; i < rows * d; ++i) values[at + i] = io::bf16_to_float(v[i]);
      }
  });
}

// The inverse: the touched pages are read, the rows replaced, the pages written back, all on
// the forward stream (the chunks computed on this prefix come after it there).
void CudaStageCompute::write_kv(int prompt, int64_t pos0, int count, const float* keys, const float* values) {
  if (!cp_ring_) return write_rows(prompt, pos0, count, keys, values);
  // With CP this rank keeps its share of the range, cut as a chunk's.
  std::vector<std::vector<sched::RowRun>>& rows = cp_rows_[prompt];
  rows.resize(static_cast<size_t>(cp_ring_->ranks()));
  compute::write_cp_share(rows, cp_ring_->rank(), kv_shape(), pos0, count, keys, values,
                          [&](int64_t row0, int n, const float* k, const float* v) {
                            pages_->reserve(prompt, row0 + n);
                            if (row0 % page_size_ != 0) privatize_page_of(prompt, row0);  // (a shared page)
                            write_rows(prompt, row0, n, k, v);
                          });
}

void CudaStageCompute::write_rows(int prompt, int64_t pos0, int count, const float* keys, const float* values) {
  const kv::KvShape shape = kv_shape();
  pages_->reserve(prompt, pos0 + count);
  const std::vector<int>& pages = pages_->pages(prompt);
  const int64_t page_elements = shape.layers * shape.floats_per_page_layer();
  const int64_t d = shape.head_dim, layer_elements = shape.floats_per_page_layer();
  const int first = static_cast<int>(pos0 / shape.page_size);
  const int last = static_cast<int>((pos0 + count - 1) / shape.page_size);
  kv_host_.resize(static_cast<size_t>(last - first + 1) * page_elements);
  auto device_page = [&](int p) { return kv_storage_.data() + static_cast<int64_t>(pages.at(p)) * page_elements; };
  for (int p = first; p <= last; ++p)
    CUDA_CHECK(cudaMemcpyAsync(kv_host_.data() + (p - first) * page_elements, device_page(p),
                               sizeof(bf16) * page_elements, cudaMemcpyDeviceToHost, forward_stream_));
  CUDA_CHECK(cudaStreamSynchronize(forward_stream_));
  for_each_page_run(shape.page_size, pos0, count, [&](int p, int slot, int row, int rows) {
    uint16_t* page = kv_host_.data() + (p - first) * page_elements;
    for (int layer = 0; layer < shape.layers; ++layer)
      for (int head = 0; head < shape.kv_heads; ++head) {
        uint16_t* k = page + layer * layer_elements + (head * shape.page_size + slot) * d;
        uint16_t* v = k + layer_elements / 2;
        const int64_t at = ((static_cast<int64_t>(layer) * shape.kv_heads + head) * count + row) * d;
        for (int64_t i = 0; i < rows * d; ++i) k[i] = io::float_to_bf16(keys[at + i]);
        if (!shape.latent)
          for (int64_t i = 0; i < rows * d; ++i) v[i] = io::float_to_bf16(values[at + i]);
      }
  });
  for (int p = first; p <= last; ++p)
    CUDA_CHECK(cudaMemcpyAsync(device_page(p), kv_host_.data() + (p - first) * page_elements,
                               sizeof(bf16) * page_elements, cudaMemcpyHostToDevice, forward_stream_));
  CUDA_CHECK(cudaStreamSynchronize(forward_stream_));  // kv_host_ is reused by the next call
}

void CudaStageCompute::take_finished_spans(std::vector<compute::DeviceSpan>& out, bool wait_for_all) {
  while (!spans_.empty()) {
    PendingSpan& span = spans_.front();
    if (wait_for_all)
      wait_event(span.end);
    else if (cudaEventQuery(span.end) != cudaSuccess)
      break;
    float start_ms = 0, end_ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&start_ms, clock_origin_, span.start));
    CUDA_CHECK(cudaEventElapsedTime(&end_ms, clock_origin_, span.end));
    out.push_back({span.micro_batch, clock_origin_s_ + start_ms * 1e-3, clock_origin_s_ + end_ms * 1e-3});
    free_events_.push_back(span.start);
    free_events_.push_back(span.end);
    spans_.pop_front();
  }
}

float* CudaStageCompute::profiling_hidden(std::vector<float>& host) {
  profile_hidden_.ensure(host.size());
  CUDA_CHECK(cudaMemcpy(profile_hidden_.data(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  return profile_hidden_.data();
}

}  // namespace pf::cuda
