// Multi-head latent attention, expanded per key block (see latent_attention.hpp).
#include "compute/cpu/latent_attention.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "compute/cpu/attention.hpp"
#include "compute/cpu/elementwise.hpp"
#include "compute/cpu/gemm.hpp"

namespace pf::cpu {
namespace {

// DeepSeek's two LoRA norms are built with RMSNorm's default eps, not the config's.
constexpr float kLoraNormEps = 1e-6f;
constexpr int kKeyBlock = 256;  // keys expanded at a time, rounded to whole pages

}  // namespace

void latent_projections(const float* x, int tokens, const model::ModelConfig& c, int heads,
                        const model::LayerWeights& l, float* q, LatentWorkspace& ws) {
  const model::MlaConfig& m = c.mla;
  const int h = c.hidden_size, q_width = heads * c.head_dim, lw = m.latent_width();
  if (m.q_lora_rank > 0) {
    ws.q_lora.resize(static_cast<size_t>(tokens) * m.q_lora_rank);
    linear(x, tokens, h, l.q_a.data(), m.q_lora_rank, ws.q_lora.data());
    rms_norm(ws.q_lora.data(), tokens, m.q_lora_rank, m.q_lora_rank, l.q_a_norm.data(), kLoraNormEps, ws.q_lora.data(),
             m.q_lora_rank);
    linear(ws.q_lora.data(), tokens, m.q_lora_rank, l.q_b.data(), q_width, q);
  } else {
    linear(x, tokens, h, l.q_b.data(), q_width, q);
  }
  ws.latent.resize(static_cast<size_t>(tokens) * lw);
  linear(x, tokens, h, l.kv_a.data(), lw, ws.latent.data());
  rms_norm(ws.latent.data(), tokens, m.kv_lora_rank, lw, l.kv_a_norm.data(), kLoraNormEps, ws.latent.data(), lw);
}

void latent_rope(float* q, int tokens, const model::ModelConfig& c, int heads, int pos0,
                 const std::vector<double>& inv_freq, float rope_scale, float* latent) {
  const model::MlaConfig& m = c.mla;
  const int q_width = heads * c.head_dim;
  for (int head = 0; head < heads; ++head)
    apply_rope(q + head * c.head_dim + m.qk_nope_head_dim, tokens, q_width, 1, m.qk_rope_head_dim, pos0, inv_freq,
               rope_scale);
  apply_rope(latent + m.kv_lora_rank, tokens, m.latent_width(), 1, m.qk_rope_head_dim, pos0, inv_freq, rope_scale);
}

double latent_attention_flops(const model::ModelConfig& c, int heads, int tokens, int pos0) {
  const model::MlaConfig& m = c.mla;
  const double keys = static_cast<double>(tokens) * pos0 + 0.5 * tokens * (tokens + 1.0);
  const double expansion =
      2.0 * (static_cast<double>(pos0) + tokens) * m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim);
  return expansion + 2.0 * heads * (c.head_dim + m.v_head_dim) * keys;
}

void latent_attention(const float* q, int tokens, int pos0, const kv::KvLayerView& kv, const model::ModelConfig& c,
                      int heads, const model::LayerWeights& l, float* out, LatentWorkspace& ws) {
  const model::MlaConfig& m = c.mla;
  const int nope = m.qk_nope_head_dim, rope = m.qk_rope_head_dim, v = m.v_head_dim, rank = m.kv_lora_rank;
  const int lw = m.latent_width(), qk = c.head_dim, per_head = nope + v, expanded_width = heads * per_head;
  const int64_t q_stride = static_cast<int64_t>(heads) * qk;
  const int page_size = kv.pool->shape().page_size;
  const int key_block = std::max(1, kKeyBlock / page_size) * page_size;
  const float scale = static_cast<float>(c.softmax_scale());
  const auto& pages = *kv.pages;

  ws.expanded.resize(static_cast<size_t>(key_block) * expanded_width);
  ws.rope_keys.resize(static_cast<size_t>(key_block) * rope);
  ws.scores.resize(static_cast<size_t>(tokens) * key_block);
  ws.acc.assign(static_cast<size_t>(heads) * tokens * v, 0.0f);
  ws.row_max.assign(static_cast<size_t>(heads) * tokens, kMaskedScore);
  ws.row_sum.assign(static_cast<size_t>(heads) * tokens, 0.0f);

  const int last_pos = pos0 + tokens - 1;
  for (int k0 = 0; k0 <= last_pos; k0 += key_block) {
    const int nk = std::min(key_block, last_pos + 1 - k0);
    // Expand the block's latents into every local head's k_nope | v, page by page, and gather
    // the shared rope keys.
    for (int c0 = 0; c0 < nk; c0 += page_size) {
      const int n = std::min(page_size, nk - c0);
      const float* rows = kv.pool->key_page(kv.layer, pages[(k0 + c0) / page_size], 0);  // [page_size, lw]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, expanded_width, rank, 1.0f, rows, lw, l.kv_b.data(), rank,
                  0.0f, ws.expanded.data() + static_cast<int64_t>(c0) * expanded_width, expanded_width);
      for (int r = 0; r < n; ++r)
        std::copy_n(rows + static_cast<int64_t>(r) * lw + rank, rope, ws.rope_keys.data() + (c0 + r) * rope);
    }
    count_gemm_flops(2.0 * nk * rank * expanded_width);
    // Queries whose position is below k0 see none of this block; the first visible row:
    const int first_row = std::max(0, k0 - pos0);
    const int rows = tokens - first_row;
    for (int head = 0; head < heads; ++head) {
      const float* q_head = q + first_row * q_stride + head * qk;
      float* s = ws.scores.data();
      // S = q_nope . k_nope^T + q_rope . k_rope^T, scaled.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, nk, nope, scale, q_head, q_stride,
                  ws.expanded.data() + head * per_head, expanded_width, 0.0f, s, key_block);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, nk, rope, scale, q_head + nope, q_stride,
                  ws.rope_keys.data(), rope, 1.0f, s, key_block);
      for (int r = 0; r < rows; ++r) {
        float* row = s + static_cast<int64_t>(r) * key_block;
        const int visible = pos0 + first_row + r - k0 + 1;  // keys k0 .. the query's position
        for (int col = std::max(visible, 0); col < nk; ++col) row[col] = kMaskedScore;
        const size_t at = static_cast<size_t>(head) * tokens + first_row + r;
        online_softmax_step(row, nk, ws.row_max[at], ws.row_sum[at], ws.acc.data() + at * v, v);
      }
      // acc += P . v_head
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, v, nk, 1.0f, s, key_block,
                  ws.expanded.data() + head * per_head + nope, expanded_width, 1.0f,
                  ws.acc.data() + (static_cast<size_t>(head) * tokens + first_row) * v, v);
    }
  }
  count_gemm_flops(2.0 * heads * (qk + v) * (static_cast<double>(tokens) * pos0 + 0.5 * tokens * (tokens + 1.0)));
  for (int head = 0; head < heads; ++head)
    for (int t = 0; t < tokens; ++t) {
      const size_t at = static_cast<size_t>(head) * tokens + t;
      const float inv = 1.0f / ws.row_sum[at];
      const float* a = ws.acc.data() + at * v;
      float* dst = out + static_cast<int64_t>(t) * heads * v + head * v;
      for (int i = 0; i < v; ++i) dst[i] = a[i] * inv;
    }
}

void latent_partial_attention(const float* q, int64_t q_stride, int m, const int32_t* visible, const float* latent,
                              int n, const model::ModelConfig& c, int heads, const model::LayerWeights& l, float* out,
                              int64_t out_stride, float* lse, LatentWorkspace& ws) {
  const model::MlaConfig& mc = c.mla;
  const int nope = mc.qk_nope_head_dim, rope = mc.qk_rope_head_dim, v = mc.v_head_dim, rank = mc.kv_lora_rank;
  const int lw = mc.latent_width(), qk = c.head_dim, per_head = nope + v, expanded_width = heads * per_head;
  const float scale = static_cast<float>(c.softmax_scale());
  double pairs = 0;  // (query, visible key) pairs, for the FLOP count
  for (int i = 0; i < m; ++i) {
    if (i > 0 && visible[i] < visible[i - 1])
      throw std::logic_error("latent_partial_attention: visible counts must not decrease");
    pairs += std::min(visible[i], n);
  }
  const int seen = m > 0 ? std::min(visible[m - 1], n) : 0;  // the keys any row sees
  ws.expanded.resize(static_cast<size_t>(kKeyBlock) * expanded_width);
  ws.rope_keys.resize(static_cast<size_t>(kKeyBlock) * rope);
  ws.scores.resize(static_cast<size_t>(m) * kKeyBlock);
  ws.acc.assign(static_cast<size_t>(heads) * m * v, 0.0f);
  ws.row_max.assign(static_cast<size_t>(heads) * m, kMaskedScore);
  ws.row_sum.assign(static_cast<size_t>(heads) * m, 0.0f);
  int first_row = 0;  // rows before it see none of the block
  for (int k0 = 0; k0 < seen; k0 += kKeyBlock) {
    const int nk = std::min(kKeyBlock, seen - k0);
    const float* rows = latent + static_cast<int64_t>(k0) * lw;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nk, expanded_width, rank, 1.0f, rows, lw, l.kv_b.data(), rank,
                0.0f, ws.expanded.data(), expanded_width);
    for (int r = 0; r < nk; ++r)
      std::copy_n(rows + static_cast<int64_t>(r) * lw + rank, rope,
                  ws.rope_keys.data() + static_cast<int64_t>(r) * rope);
    count_gemm_flops(2.0 * nk * rank * expanded_width);
    while (first_row < m && visible[first_row] <= k0) ++first_row;
    const int count = m - first_row;
    for (int head = 0; head < heads; ++head) {
      const float* q_head = q + first_row * q_stride + head * qk;
      float* s = ws.scores.data();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, count, nk, nope, scale, q_head, static_cast<int>(q_stride),
                  ws.expanded.data() + head * per_head, expanded_width, 0.0f, s, kKeyBlock);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, count, nk, rope, scale, q_head + nope,
                  static_cast<int>(q_stride), ws.rope_keys.data(), rope, 1.0f, s, kKeyBlock);
      for (int r = 0; r < count; ++r) {
        float* row = s + static_cast<int64_t>(r) * kKeyBlock;
        for (int col = visible[first_row + r] - k0; col < nk; ++col) row[col] = kMaskedScore;
        const size_t at = static_cast<size_t>(head) * m + first_row + r;
        online_softmax_step(row, nk, ws.row_max[at], ws.row_sum[at], ws.acc.data() + at * v, v);
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, count, v, nk, 1.0f, s, kKeyBlock,
                  ws.expanded.data() + head * per_head + nope, expanded_width, 1.0f,
                  ws.acc.data() + (static_cast<size_t>(head) * m + first_row) * v, v);
    }
  }
  count_gemm_flops(2.0 * heads * (qk + v) * pairs);
  for (int head = 0; head < heads; ++head)
    for (int t = 0; t < m; ++t) {
      const size_t at = static_cast<size_t>(head) * m + t;
      const float sum = ws.row_sum[at], inv = sum > 0 ? 1.0f / sum : 0.0f;
      const float* a = ws.acc.data() + at * v;
      float* dst = out + t * out_stride + head * v;
      for (int i = 0; i < v; ++i) dst[i] = a[i] * inv;
      lse[static_cast<int64_t>(t) * heads + head] =
          sum > 0 ? ws.row_max[at] + std::log(sum) : -std::numeric_limits<float>::infinity();
    }
}

LatentRingKeys::LatentRingKeys(const kv::KvLayerView& kv, const model::ModelConfig& config, int heads,
                               const model::LayerWeights& layer, LatentWorkspace& ws)
    : kv_(kv), config_(config), heads_(heads), layer_(layer), ws_(ws) {}

sched::CpWidths LatentRingKeys::widths() const {
  return sched::CpWidths::latent(heads_, config_.mla.latent_width(), config_.head_dim, config_.mla.v_head_dim);
}

// This rank's first `rows` latent rows of the layer, [rows, kv_lora + rope].
void LatentRingKeys::pack(int64_t rows, std::vector<float>& shard) const {
  const kv::KvShape& shape = kv_.pool->shape();
  const int64_t lw = shape.head_dim;  // (a latent cache: one "head" of the latent's width)
  shard.resize(static_cast<size_t>(rows * lw));
  for (int64_t p = 0; p < rows;) {
    const int page = kv_.pages->at(static_cast<size_t>(p / shape.page_size));
    const int64_t in_page = p % shape.page_size, run = std::min<int64_t>(shape.page_size - in_page, rows - p);
    kv_.pool->load_rows(kv_.layer, page, 0, false, in_page * lw, run * lw, shard.data() + p * lw);
    p += run;
  }
}

void LatentRingKeys::attend(const float* q, int64_t q_stride, int m, const int32_t* visible, const float* shard, int n,
                            float* out, int64_t out_stride, float* lse) {
  latent_partial_attention(q, q_stride, m, visible, shard, n, config_, heads_, layer_, out, out_stride, lse, ws_);
}

}  // namespace pf::cpu
