// Multi-head latent attention (DeepSeek-V2/V3) of the cuda backend, absorbed as the cpu
// backend computes it (compute/cpu/latent_attention.cpp): the LoRA projections and their
// norms, RoPE on the rope parts, the latent row of each token into the paged cache, then
// per head q_nope carried into the latent space through kv_b's W_UK slice (one batched
// GEMM over the heads), attention over the cached latent rows (kernels/latent_attention.cu),
// and each head's latent output carried out through its W_UV slice (another).
#pragma once

#include <cuda_runtime.h>

#include "compute/cuda/device_weights.hpp"
#include "compute/cuda/lt_gemm.hpp"
#include "compute/cuda/ring_on_gpu.hpp"
#include "device/device_array.hpp"
#include "kernels/kernels.hpp"
#include "model/config.hpp"
#include "model/weights.hpp"

namespace pf::cuda {

class LatentOnGpu {
 public:
  LatentOnGpu(const model::ModelConfig& config, const model::ShardSpec& shard);

  // Workspace for chunks of up to `tokens` tokens.
  void reserve(int tokens);
  // x [tokens, hidden] (normed, bf16) -> q [tokens, heads * (nope + rope)] (this rank's heads)
  // and the chunk's latent rows [normed kv_lora | k_rope], kept here; before RoPE.
  void projections(const bf16* x, int tokens, const DeviceLayer& layer, LtGemm& gemm, float* q, cudaStream_t stream);
  // RoPE on the rope parts of q's rows [row0, row0 + tokens) and of those latent rows, at
  // positions pos0...
  void rope(float* q, int row0, int tokens, int64_t pos0, const double* inv_freq, float scale, cudaStream_t stream);
  // The latent rows into the prompt's pages of `layer` (kv: a latent cache).
  void append(const kernels::PagedKv& kv, int layer, int64_t pos0, int tokens, cudaStream_t stream);
  // out [tokens, heads * v_head_dim] (bf16, the o projection's input) = attention of q over
  // the prompt's latent cache, this chunk's rows appended first. With context parallelism
  // (`ring`), the tokens are this rank's share and the keys every rank's latent rows, this
  // rank's the first `local_rows` of its cache.
  void attention(const float* q, int tokens, int64_t pos0, const kernels::PagedKv& kv, int layer,
                 const DeviceLayer& weights, LtGemm& gemm, bf16* out, cudaStream_t stream, RingOnGpu* ring = nullptr,
                 int64_t local_rows = 0);

 private:
  model::MlaConfig mla_;
  int hidden_, heads_, qk_;  // qk: a head's q.k width, nope + rope
  float softmax_scale_;
  int reserved_tokens_ = 0;
  DeviceArray<float> q_lora_, latent_, q_absorbed_, out_heads_;
  DeviceArray<bf16> q_lora_normed_, q_nope_, out_latent_;
};

}  // namespace pf::cuda
