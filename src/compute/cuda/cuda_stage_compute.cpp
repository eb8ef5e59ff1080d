// The CUDA stage compute (see cuda_stage_compute.hpp). One decoder layer, Megatron TP:
//   rmsnorm -> qkv GEMM (+bias) [-> q/k norm] -> RoPE -> K/V into pages -> chunk attention
//   -> o GEMM [-> all-reduce] -> residual -> rmsnorm -> gate_up GEMM -> SwiGLU -> down GEMM
//   [-> all-reduce] -> residual.
// With tp == 1 the o and down GEMMs add into the residual stream directly (beta = 1).
#include "compute/cuda/cuda_stage_compute.hpp"

#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "compute/cpu/elementwise.hpp"

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
                                   DeviceWeights weights, int page_size, int max_chunk_tokens)
    : config_(config), shard_(shard), weights_(std::move(weights)), page_size_(page_size) {
  CUDA_CHECK(cudaStreamCreateWithFlags(&forward_stream_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&logits_ready_, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&logits_copied_, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&drained_, cudaEventDisableTiming));
  inv_freq_.upload(cpu::rope_inv_freq(config_));
  ensure_workspace(max_chunk_tokens);
  if (shard_.vocab_count > 0) {
    logits_.ensure(shard_.vocab_count);
    CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&logits_host_), sizeof(float) * shard_.vocab_count));
  }
  staging_.resize(kStagingSlots);
  for (auto& slot : staging_) CUDA_CHECK(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming));
}

void CudaStageCompute::wait_event(cudaEvent_t event) {
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
  cudaEventDestroy(logits_ready_);
  cudaEventDestroy(logits_copied_);
  cudaEventDestroy(drained_);
  cudaStreamDestroy(copy_stream_);
  cudaStreamDestroy(forward_stream_);
}

int64_t CudaStageCompute::free_device_bytes() {
  size_t free_bytes = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  return static_cast<int64_t>(free_bytes);
}

kv::KvShape CudaStageCompute::kv_shape() const {
  kv::KvShape shape{static_cast<int>(weights_.layers.size()), shard_.kv_heads, config_.head_dim, page_size_};
  shape.element_bytes = sizeof(bf16);
  return shape;
}

void CudaStageCompute::allocate_kv(int num_pages) {
  const kv::KvShape shape = kv_shape();
  pages_ = std::make_unique<kv::PageTable>(num_pages, page_size_);
  kv_storage_ = DeviceArray<bf16>(static_cast<size_t>(num_pages) * shape.layers * shape.floats_per_page_layer());
  page_table_ = DeviceArray<int32_t>(std::max(num_pages, 1));
}

void CudaStageCompute::ensure_workspace(int tokens) {
  if (tokens <= workspace_tokens_) return;  // (growing a DeviceArray waits for queued work)
  const size_t t = tokens, h = config_.hidden_size, d = config_.head_dim;
  const size_t q_width = shard_.heads * d, qkv_width = q_width + 2 * shard_.kv_heads * d;
  normed_.ensure(t * h);
  qkv_.ensure(t * qkv_width);
  attn_.ensure(t * q_width);
  proj_.ensure(t * h);
  gate_up_.ensure(t * 2 * shard_.intermediate);
  act_.ensure(t * shard_.intermediate);
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

void CudaStageCompute::forward(const compute::ChunkContext& chunk, float* hidden, const compute::AllReduce& reduce) {
  if (!pages_) fail("pipefill", "CudaStageCompute::forward", "allocate_kv() was not called", __FILE__, __LINE__);
  ensure_workspace(chunk.tokens);
  pages_->reserve(chunk.prompt, chunk.pos0 + chunk.tokens);
  upload_page_table(chunk.prompt);
  const bool timed = clock_origin_ != nullptr && chunk.micro_batch >= 0;
  PendingSpan span{chunk.micro_batch, nullptr, nullptr};
  if (timed) {
    span.start = take_event();
    span.end = take_event();
    CUDA_CHECK(cudaEventRecord(span.start, forward_stream_));
  }
  for (int layer = 0; layer < static_cast<int>(weights_.layers.size()); ++layer)
    layer_forward(layer, chunk, hidden, reduce);
  if (timed) {
    CUDA_CHECK(cudaEventRecord(span.end, forward_stream_));
    spans_.push_back(span);
  }
}

void CudaStageCompute::layer_forward(int layer, const compute::ChunkContext& chunk, float* hidden,
                                     const compute::AllReduce& reduce) {
  const DeviceLayer& w = weights_.layers[layer];
  const int h = config_.hidden_size, d = config_.head_dim, t = chunk.tokens;
  const int heads = shard_.heads, kv_heads = shard_.kv_heads, inter = shard_.intermediate;
  const int q_width = heads * d, kv_width = kv_heads * d, qkv_width = q_width + 2 * kv_width;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const cudaStream_t s = forward_stream_;
  const bool sharded = shard_.tp > 1;
  float* qkv = qkv_.data();

  // Attention block.
  kernels::rms_norm_rows(hidden, t, h, h, w.input_norm.data(), eps, normed_.data(), h, s);
  gemm_.linear(normed_.data(), t, h, w.qkv.data(), qkv_width, qkv, s);
  if (!w.qkv_bias.empty()) kernels::bias_add(qkv, t, qkv_width, qkv_width, w.qkv_bias.data(), s);
  if (config_.qk_norm) {
    kernels::rms_norm_heads(qkv, t, heads, d, qkv_width, w.q_norm.data(), eps, s);
    kernels::rms_norm_heads(qkv + q_width, t, kv_heads, d, qkv_width, w.k_norm.data(), eps, s);
  }
  kernels::rope(qkv, t, qkv_width, heads, kv_heads, q_width, d, chunk.pos0, inv_freq_.data(), s);
  kernels::PagedKv kv{kv_storage_.data(), page_table_.data(), static_cast<int>(weights_.layers.size()), kv_heads, d,
                      page_size_};
  kernels::kv_append(kv, layer, chunk.pos0, t, qkv + q_width, qkv + q_width + kv_width, qkv_width, s);
  kernels::AttentionArgs args;
  args.q = qkv;
  args.q_stride = qkv_width;
  args.tokens = t;
  args.pos0 = chunk.pos0;
  args.heads = heads;
  args.kv = kv;
  args.layer = layer;
  args.out = attn_.data();
  args.out_stride = q_width;
  kernels::chunk_attention(args, s);
  CUDA_CHECK_LAUNCH();
  if (sharded) {  // row parallel: partial sums, reduced, then added
    gemm_.linear(attn_.data(), t, q_width, w.o.data(), h, proj_.data(), s);
    reduce(proj_.data(), t * h);
    kernels::residual_add(hidden, proj_.data(), static_cast<int64_t>(t) * h, s);
  } else {
    gemm_.linear(attn_.data(), t, q_width, w.o.data(), h, hidden, s, /*beta=*/1.0f);
  }

  // MLP block.
  kernels::rms_norm_rows(hidden, t, h, h, w.post_norm.data(), eps, normed_.data(), h, s);
  gemm_.linear(normed_.data(), t, h, w.gate_up.data(), 2 * inter, gate_up_.data(), s);
  kernels::swiglu(gate_up_.data(), t, inter, act_.data(), s);
  if (sharded) {
    gemm_.linear(act_.data(), t, inter, w.down.data(), h, proj_.data(), s);
    reduce(proj_.data(), t * h);
    kernels::residual_add(hidden, proj_.data(), static_cast<int64_t>(t) * h, s);
  } else {
    gemm_.linear(act_.data(), t, inter, w.down.data(), h, hidden, s, /*beta=*/1.0f);
  }
  CUDA_CHECK_LAUNCH();
}

void CudaStageCompute::lm_head(const float* hidden_row, float* logits_shard) {
  const int h = config_.hidden_size;
  kernels::rms_norm_rows(hidden_row, 1, h, h, weights_.final_norm.data(), static_cast<float>(config_.rms_norm_eps),
                         normed_.data(), h, forward_stream_);
  gemm_.linear(normed_.data(), 1, h, weights_.lm_head.data(), shard_.vocab_count, logits_.data(), forward_stream_);
  CUDA_CHECK_LAUNCH();
  // The copy stream takes the logits off the device; the forward stream goes on.
  CUDA_CHECK(cudaEventRecord(logits_ready_, forward_stream_));
  CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, logits_ready_, 0));
  CUDA_CHECK(cudaMemcpyAsync(logits_host_, logits_.data(), sizeof(float) * shard_.vocab_count, cudaMemcpyDeviceToHost,
                             copy_stream_));
  CUDA_CHECK(cudaEventRecord(logits_copied_, copy_stream_));
  wait_event(logits_copied_);
  std::memcpy(logits_shard, logits_host_, sizeof(float) * shard_.vocab_count);
}

void CudaStageCompute::finish_prompt(int prompt) {
  // Later kernels that reuse these pages run after this prompt's, in stream order.
  if (pages_) pages_->release(prompt);
}

void CudaStageCompute::prepare_prefix(int prompt, int64_t prefix, int tokens) {
  pages_->reserve(prompt, prefix + tokens);
  // Attention's cost does not depend on the values; random, never zeros or garbage.
  kernels::fill_uniform_bf16(kv_storage_.data(), static_cast<int64_t>(kv_storage_.size()),
                             static_cast<uint64_t>(prefix) + 1, 1.0f, forward_stream_);
  CUDA_CHECK_LAUNCH();
}

int64_t CudaStageCompute::capacity_tokens() const {
  return pages_ ? static_cast<int64_t>(pages_->num_pages()) * page_size_ : 0;
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
