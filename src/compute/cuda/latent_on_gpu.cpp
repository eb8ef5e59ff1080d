// Absorbed multi-head latent attention on the GPU (see latent_on_gpu.hpp).
#include "compute/cuda/latent_on_gpu.hpp"

namespace pf::cuda {
namespace {

// DeepSeek's two LoRA norms are built with RMSNorm's default eps, not the config's (as
// compute/cpu/latent_attention.cpp).
constexpr float kLoraNormEps = 1e-6f;

}  // namespace

LatentOnGpu::LatentOnGpu(const model::ModelConfig& config, const model::ShardSpec& shard)
    : mla_(config.mla),
      hidden_(config.hidden_size),
      heads_(shard.heads),
      qk_(config.head_dim),
      softmax_scale_(static_cast<float>(config.softmax_scale())) {}

void LatentOnGpu::reserve(int tokens) {
  if (tokens <= reserved_tokens_) return;
  const size_t t = tokens, heads = heads_, width = mla_.latent_width();
  q_lora_.ensure(t * mla_.q_lora_rank);
  q_lora_normed_.ensure(t * mla_.q_lora_rank);
  latent_.ensure(t * width);
  q_nope_.ensure(t * heads * mla_.qk_nope_head_dim);
  q_absorbed_.ensure(t * heads * width);
  out_latent_.ensure(t * heads * mla_.kv_lora_rank);
  out_heads_.ensure(t * heads * mla_.v_head_dim);
  reserved_tokens_ = tokens;
}

void LatentOnGpu::projections(const bf16* x, int tokens, const DeviceLayer& l, LtGemm& gemm, float* q,
                              cudaStream_t stream) {
  const int h = hidden_, q_lora = mla_.q_lora_rank, q_width = heads_ * qk_, width = mla_.latent_width();
  if (q_lora > 0) {
    gemm.linear(x, tokens, h, l.q_a.data(), q_lora, q_lora_.data(), stream);
    kernels::rms_norm_rows(q_lora_.data(), tokens, q_lora, q_lora, l.q_a_norm.data(), kLoraNormEps,
                           q_lora_normed_.data(), q_lora, stream);
    gemm.linear(q_lora_normed_.data(), tokens, q_lora, l.q_b.data(), q_width, q, stream);
  } else {
    gemm.linear(x, tokens, h, l.q_b.data(), q_width, q, stream);
  }
  gemm.linear(x, tokens, h, l.kv_a.data(), width, latent_.data(), stream);
  // The norm covers the latent only, not the rope key beside it.
  kernels::rms_norm_heads(latent_.data(), tokens, 1, mla_.kv_lora_rank, width, l.kv_a_norm.data(), kLoraNormEps,
                          stream);
  CUDA_CHECK_LAUNCH();
}

void LatentOnGpu::rope(float* q, int row0, int tokens, int64_t pos0, const double* inv_freq, float scale,
                       cudaStream_t stream) {
  const int rope = mla_.qk_rope_head_dim, width = mla_.latent_width();
  const int64_t q_width = static_cast<int64_t>(heads_) * qk_;
  kernels::rope_heads(q + row0 * q_width + mla_.qk_nope_head_dim, tokens, q_width, heads_, qk_, rope, pos0, inv_freq,
                      scale, stream);
  kernels::rope_heads(latent_.data() + static_cast<int64_t>(row0) * width + mla_.kv_lora_rank, tokens, width, 1, 0,
                      rope, pos0, inv_freq, scale, stream);
  CUDA_CHECK_LAUNCH();
}

void LatentOnGpu::append(const kernels::PagedKv& kv, int layer, int64_t pos0, int tokens, cudaStream_t stream) {
  kernels::kv_append(kv, layer, pos0, tokens, latent_.data(), nullptr, mla_.latent_width(), stream);
  CUDA_CHECK_LAUNCH();
}

void LatentOnGpu::attention(const float* q, int tokens, int64_t pos0, const kernels::PagedKv& kv, int layer,
                            const DeviceLayer& l, LtGemm& gemm, bf16* out, cudaStream_t stream, RingOnGpu* ring,
                            int64_t local_rows) {
  const int nope = mla_.qk_nope_head_dim, rope = mla_.qk_rope_head_dim, v = mla_.v_head_dim;
  const int rank = mla_.kv_lora_rank, width = mla_.latent_width();
  // kv_b holds per head [nope rows of W_UK | v rows of W_UV], each row kv_lora wide.
  const int64_t kv_b_head = static_cast<int64_t>(nope + v) * rank;
  kernels::split_latent_queries(q, static_cast<int64_t>(heads_) * qk_, tokens, heads_, nope, rope, rank, q_nope_.data(),
                                q_absorbed_.data(), stream);

  // q_absorbed[:, head, :rank] = q_nope(head) . W_UK(head), W_UK stored [nope, rank] = [in, out].
  GemmBatch absorb;
  absorb.count = heads_;
  absorb.x_ld = static_cast<int64_t>(heads_) * nope;
  absorb.x_stride = nope;
  absorb.w_stride = kv_b_head;
  absorb.w_in_out = true;
  absorb.y_ld = static_cast<int64_t>(heads_) * width;
  absorb.y_stride = width;
  gemm.linear_batched(q_nope_.data(), tokens, nope, l.kv_b.data(), rank, q_absorbed_.data(), absorb, stream);

  if (ring) {  // every rank's latent rows, merged in float, rounded as the kernel's output is
    const float* merged = ring->attend(q_absorbed_.data(), static_cast<int64_t>(heads_) * width, kv, layer, local_rows,
                                       heads_, rank, softmax_scale_);
    kernels::float_to_bf16(merged, out_latent_.data(), static_cast<int64_t>(tokens) * heads_ * rank, stream);
  } else {
    kernels::LatentAttentionArgs args;
    args.q = q_absorbed_.data();
    args.q_stride = static_cast<int64_t>(heads_) * width;
    args.tokens = tokens;
    args.pos0 = pos0;
    args.heads = heads_;
    args.kv = kv;
    args.layer = layer;
    args.scale = softmax_scale_;
    args.value_width = rank;
    args.out = out_latent_.data();
    args.out_stride = static_cast<int64_t>(heads_) * rank;
    kernels::latent_attention(args, stream);
  }
  CUDA_CHECK_LAUNCH();

  // out(head) = out_latent(head) . W_UV(head)^T, W_UV stored [v, rank] = [out, in].
  GemmBatch expand;
  expand.count = heads_;
  expand.x_ld = static_cast<int64_t>(heads_) * rank;
  expand.x_stride = rank;
  expand.w_stride = kv_b_head;
  expand.y_ld = static_cast<int64_t>(heads_) * v;
  expand.y_stride = v;
  gemm.linear_batched(out_latent_.data(), tokens, rank, l.kv_b.data() + static_cast<int64_t>(nope) * rank, v,
                      out_heads_.data(), expand, stream);
  kernels::float_to_bf16(out_heads_.data(), out, static_cast<int64_t>(tokens) * heads_ * v, stream);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pf::cuda
