// Absorbed multi-head latent attention (see latent_attention.hpp).
#include "compute/cpu/latent_attention.hpp"

#include <cblas.h>

#include <algorithm>

#include "compute/cpu/elementwise.hpp"
#include "compute/cpu/gemm.hpp"

namespace pf::cpu {
namespace {

// DeepSeek's two LoRA norms are built with RMSNorm's default eps, not the config's.
constexpr float kLoraNormEps = 1e-6f;

}  // namespace

void latent_projections(const float* x, int tokens, const model::ModelConfig& c, int heads,
                        const model::LayerWeights& l, float* q, LatentWorkspace& ws) {
  const model::MlaConfig& m = c.mla;
  const int h = c.hidden_size, q_width = heads * c.head_dim, lw = m.latent_width();
  if (m.q_lora_rank > 0) {
    ws.q_lora.resize(static_cast<size_t>(tokens) * m.q_lora_rank);
    linear(x, tokens, h, l.q_a.data(), m.q_lora_rank, ws.q_lora.data());
    rms_norm(ws.q_lora.data(), tokens, m.q_lora_rank, m.q_lora_rank, l.q_a_norm.data(), kLoraNormEps,
             ws.q_lora.data(), m.q_lora_rank);
    linear(ws.q_lora.data(), tokens, m.q_lora_rank, l.q_b.data(), q_width, q);
  } else {
    linear(x, tokens, h, l.q_b.data(), q_width, q);
  }
  ws.latent.resize(static_cast<size_t>(tokens) * lw);
  linear(x, tokens, h, l.kv_a.data(), lw, ws.latent.data());
  rms_norm(ws.latent.data(), tokens, m.kv_lora_rank, lw, l.kv_a_norm.data(), kLoraNormEps, ws.latent.data(), lw);
}

void latent_rope(float* q, int tokens, const model::ModelConfig& c, int heads, int pos0,
                 const std::vector<double>& inv_freq, float rope_scale, LatentWorkspace& ws) {
  const model::MlaConfig& m = c.mla;
  const int q_width = heads * c.head_dim;
  for (int head = 0; head < heads; ++head)
    apply_rope(q + head * c.head_dim + m.qk_nope_head_dim, tokens, q_width, 1, m.qk_rope_head_dim, pos0, inv_freq,
               rope_scale);
  apply_rope(ws.latent.data() + m.kv_lora_rank, tokens, m.latent_width(), 1, m.qk_rope_head_dim, pos0, inv_freq,
             rope_scale);
}

void latent_attention(const float* q, int tokens, int pos0, const kv::KvLayerView& kv, const model::ModelConfig& c,
                      int heads, const model::LayerWeights& l, float* out, LatentWorkspace& ws) {
  const model::MlaConfig& m = c.mla;
  const int nope = m.qk_nope_head_dim, rope = m.qk_rope_head_dim, v = m.v_head_dim, rank = m.kv_lora_rank;
  const int lw = m.latent_width(), qk = c.head_dim, kv_b_rows = nope + v;
  const int64_t wide = static_cast<int64_t>(heads) * lw;  // row width of the absorbed q and the latent output
  ws.q_absorbed.resize(static_cast<size_t>(tokens) * wide);
  ws.out_latent.resize(static_cast<size_t>(tokens) * wide);
  for (int head = 0; head < heads; ++head) {
    // q_latent = q_nope . W_UK: W_UK is kv_b's [nope, kv_lora] rows of this head.
    const float* w_uk = l.kv_b.data() + static_cast<int64_t>(head) * kv_b_rows * rank;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, tokens, rank, nope, 1.0f, q + head * qk,
                static_cast<int64_t>(heads) * qk, w_uk, rank, 0.0f, ws.q_absorbed.data() + head * lw, wide);
    count_gemm_flops(2.0 * tokens * rank * nope);
    for (int t = 0; t < tokens; ++t)
      std::copy_n(q + static_cast<int64_t>(t) * heads * qk + head * qk + nope, rope,
                  ws.q_absorbed.data() + t * wide + head * lw + rank);
  }
  chunk_attention_scaled(ws.q_absorbed.data(), wide, tokens, pos0, kv, heads, static_cast<float>(c.softmax_scale()),
                         ws.out_latent.data(), wide, ws.attention);
  for (int head = 0; head < heads; ++head) {
    // out = out_latent[:, :kv_lora] . W_UV^T: W_UV is kv_b's [v, kv_lora] rows of this head.
    const float* w_uv = l.kv_b.data() + (static_cast<int64_t>(head) * kv_b_rows + nope) * rank;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, tokens, v, rank, 1.0f, ws.out_latent.data() + head * lw, wide,
                w_uv, rank, 0.0f, out + head * v, static_cast<int64_t>(heads) * v);
    count_gemm_flops(2.0 * tokens * v * rank);
  }
}

}  // namespace pf::cpu
