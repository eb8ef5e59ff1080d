// Chunk attention: the hand-written kernel of this CPU's ISA (attention_tiles.hpp), its work
// spread over the rank's threads; or, where none fits (another CPU, an odd head size), the
// portable path below with both matrix products in sgemm.
//
// Portable path: for each KV head, the queries of its GQA group are packed into one matrix whose rows are
// (token, head-in-group): the group shares its keys, so one GEMM serves all of its heads.
// Key blocks are whole pages; each page of one head is a contiguous [page_size, head_dim]
// matrix (see paged_kv_pool.hpp), so S = Q K^T and O += P V are GEMMs straight on the cache.
#include "compute/cpu/attention.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "compute/cpu/attention_kernels.hpp"
#include "compute/cpu/cpu_features.hpp"
#include "compute/cpu/elementwise.hpp"
#include "compute/cpu/gemm.hpp"
#include "compute/cpu/thread_pool.hpp"
#include "io/bf16.hpp"

namespace pf::cpu {
namespace {

constexpr int kTargetQueryRows = 256;  // rows of Q per block: S (rows x key block) stays in L2
constexpr int kTargetKeyBlock = 256;   // keys per block, rounded to whole pages
constexpr int kKernelBlockRows = 192;  // query rows per task of the kernels: Q^T and O^T stay in L2

using BlockKernel = void (*)(const QueryBlock&, TileScratch&);

// Whether a bf16 pool attends on vdpbf16ps unless told otherwise: where the bf16 GEMMs do.
bool bf16_dot_by_default() {
  return bf16_gemm_kernels().dot && bf16_dot_available();
}

// The kernel for this head size on this CPU, or nullptr for the portable path.
BlockKernel block_kernel(Isa isa, int head_dim, bool bf16_dot) {
#if defined(PIPEFILL_X86_KERNELS)
  if (bf16_dot && isa == Isa::kAvx512 && bf16_dot_attention_fits(head_dim)) return attend_query_block_bf16_dot;
  switch (isa) {
    case Isa::kAvx512:
      if (avx512_attention_fits(head_dim)) return attend_query_block_avx512;
      // A head size AVX-512's value tile does not divide (even, not a multiple of 8) on the
      // AVX2 kernel, rather than the portable path: AVX-512 CPUs have AVX2 and FMA.
      return isa_available(Isa::kAvx2) && avx2_attention_fits(head_dim) ? attend_query_block_avx2 : nullptr;
    case Isa::kAvx2:
      return avx2_attention_fits(head_dim) ? attend_query_block_avx2 : nullptr;
    case Isa::kPortable:
      break;
  }
#else
  (void)isa;
  (void)head_dim;
  (void)bf16_dot;
#endif
  return nullptr;
}

// Tasks of (KV head, query block), the later (costlier, under the causal mask) blocks first.
// Blocks are small enough that every thread gets a few tasks, large enough for whole tiles.
// `like` holds what every block shares beyond the chunk (context parallelism's fields).
void attend_with_kernel(BlockKernel kernel, const float* q, int64_t q_stride, int tokens, int pos0,
                        const kv::KvLayerView* kv, int heads, int kv_heads, int head_dim, float scale, bool bf16,
                        float* out, int64_t out_stride, AttentionWorkspace& ws, const QueryBlock& like = {}) {
  ThreadPool& pool = ThreadPool::instance();
  const int group = heads / kv_heads;
  const int threads = pool.threads();
  const int per_head_for_threads = (4 * threads + kv_heads - 1) / kv_heads;
  const int rows_per_block =
      std::max(kKernelBlockRows / 4, std::min(kKernelBlockRows, tokens * group / per_head_for_threads));
  const int block_tokens = std::max(1, rows_per_block / group);
  const int blocks = (tokens + block_tokens - 1) / block_tokens;
  if (static_cast<int>(ws.threads.size()) < threads) ws.threads.resize(threads);
  pool.run(kv_heads * blocks, [&](int task, int thread) {
    const int block = blocks - 1 - task / kv_heads;
    QueryBlock b = like;
    b.q = q;
    b.q_stride = q_stride;
    b.out = out;
    b.out_stride = out_stride;
    b.kv = kv;
    b.head_dim = head_dim;
    b.kv_head = task % kv_heads;
    b.group = group;
    b.first_token = block * block_tokens;
    b.tokens = std::min(block_tokens, tokens - b.first_token);
    b.pos0 = pos0;
    b.scale = scale;
    b.bf16 = bf16;
    kernel(b, ws.threads[thread]);
  });
}

}  // namespace

bool attend_packed_shard(const float* q, int64_t q_stride, int tokens, const int32_t* last_key, const float* keys,
                         const float* values, int64_t rows, int heads, int kv_heads, int head_dim, float scale,
                         bool round_bf16, float* out, int64_t out_stride, float* lse, AttentionWorkspace& ws) {
  const BlockKernel kernel = block_kernel(kernel_isa(), head_dim, /*bf16_dot=*/false);
  if (!kernel) return false;
  QueryBlock like;
  like.last_key = last_key;
  like.packed_keys = keys;
  like.packed_values = values;
  like.packed_rows = rows;
  like.lse = lse;
  like.lse_stride = heads;
  attend_with_kernel(kernel, q, q_stride, tokens, 0, nullptr, heads, kv_heads, head_dim, scale, round_bf16, out,
                     out_stride, ws, like);
  return true;
}

float* TileScratch::floats(int slot, size_t n) {
  auto& buffer = buffers_[slot];
  if (buffer.size() < n + 16) buffer.resize(n + 16);
  const auto address = reinterpret_cast<uintptr_t>(buffer.data());
  return buffer.data() + ((64 - address % 64) % 64) / sizeof(float);
}

int32_t* TileScratch::positions(size_t n) {
  if (positions_.size() < n + 16) positions_.resize(n + 16);
  return positions_.data();
}

void online_softmax_step(float* s, int n, float& row_max, float& row_sum, float* acc, int width) {
  float block_max = kMaskedScore;
  for (int c = 0; c < n; ++c) block_max = std::max(block_max, s[c]);
  const float new_max = std::max(row_max, block_max);
  const float correction = std::exp(row_max - new_max);  // what was accumulated, rescaled
  for (int c = 0; c < n; ++c) s[c] -= new_max;
  exp_inplace(s, n);
  float sum = 0.0f;
  for (int c = 0; c < n; ++c) sum += s[c];
  row_sum = row_sum * correction + sum;
  row_max = new_max;
  if (correction != 1.0f)
    for (int i = 0; i < width; ++i) acc[i] *= correction;
}

double chunk_attention_flops(int tokens, int pos0, int heads, int head_dim) {
  // Query at position p sees p + 1 keys; 4 * head_dim FLOPs per (query, key, head).
  const double keys = static_cast<double>(tokens) * pos0 + 0.5 * tokens * (tokens + 1.0);
  return 4.0 * head_dim * heads * keys;
}

std::string attention_kernel_name(int head_dim, bool bf16_pool, bool context_parallel) {
  // As chunk_attention_on decides; the CP ring's attend_packed_shard runs the float kernels.
  const bool on_dot = bf16_pool && !context_parallel && bf16_dot_by_default();
  const BlockKernel kernel = block_kernel(kernel_isa(), head_dim, on_dot);
#if defined(PIPEFILL_X86_KERNELS)
  if (kernel == attend_query_block_bf16_dot) return "avx512-bf16 (vdpbf16ps)";
  if (kernel == attend_query_block_avx512) return "avx512";
  if (kernel == attend_query_block_avx2) return "avx2";
#endif
  (void)kernel;
  if (kernel_isa() == Isa::kPortable) return "portable (sgemm)";
  return "portable (sgemm: no kernel for head size " + std::to_string(head_dim) + ")";
}

void chunk_attention(const float* q, int64_t q_stride, int tokens, int pos0, const kv::KvLayerView& kv, int heads,
                     float* out, int64_t out_stride, AttentionWorkspace& ws) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(kv.pool->shape().head_dim));
  chunk_attention_scaled(q, q_stride, tokens, pos0, kv, heads, scale, out, out_stride, ws);
}

void chunk_attention_scaled(const float* q, int64_t q_stride, int tokens, int pos0, const kv::KvLayerView& kv,
                            int heads, float scale, float* out, int64_t out_stride, AttentionWorkspace& ws) {
  chunk_attention_on(kernel_isa(), q, q_stride, tokens, pos0, kv, heads, scale, out, out_stride, ws);
}

void chunk_attention_on(Isa isa, const float* q, int64_t q_stride, int tokens, int pos0, const kv::KvLayerView& kv,
                        int heads, float scale, float* out, int64_t out_stride, AttentionWorkspace& ws,
                        std::optional<bool> bf16_dot) {
  // The causal work, as FLOP rates are quoted: the masked part of the diagonal blocks is
  // computed but not counted.
  count_gemm_flops(chunk_attention_flops(tokens, pos0, heads, kv.pool->shape().head_dim));
  const bool on_dot = kv.pool->bf16() && (bf16_dot ? *bf16_dot && bf16_dot_available() : bf16_dot_by_default());
  if (BlockKernel kernel = block_kernel(isa, kv.pool->shape().head_dim, on_dot))
    return attend_with_kernel(kernel, q, q_stride, tokens, pos0, &kv, heads, kv.pool->shape().kv_heads,
                              kv.pool->shape().head_dim, scale, kv.pool->bf16(), out, out_stride, ws);
  const kv::KvShape& shape = kv.pool->shape();
  const int d = shape.head_dim, page_size = shape.page_size, kv_heads = shape.kv_heads;
  const int group = heads / kv_heads;
  const int block_tokens = std::max(1, kTargetQueryRows / group);
  const int pages_per_block = std::max(1, kTargetKeyBlock / page_size);
  const int key_block = pages_per_block * page_size;
  const auto& pages = *kv.pages;
  const bool bf16 = kv.pool->bf16();  // rounds Q and P, reads pages through a widened copy
  // One page of one head: in place from a float pool, else widened into the workspace.
  const auto page_rows = [&](int page, int kvh, bool value) {
    if (!bf16) return value ? kv.pool->value_page(kv.layer, page, kvh) : kv.pool->key_page(kv.layer, page, kvh);
    ws.page_rows.resize(static_cast<size_t>(page_size) * d);
    kv.pool->load_rows(kv.layer, page, kvh, value, 0, int64_t(page_size) * d, ws.page_rows.data());
    return static_cast<const float*>(ws.page_rows.data());
  };

  const int max_rows = std::min(block_tokens, tokens) * group;
  ws.q_packed.resize(static_cast<size_t>(max_rows) * d);
  ws.scores.resize(static_cast<size_t>(max_rows) * key_block);
  ws.acc.resize(static_cast<size_t>(max_rows) * d);
  ws.row_max.resize(max_rows);
  ws.row_sum.resize(max_rows);

  for (int kvh = 0; kvh < kv_heads; ++kvh) {
    for (int q0 = 0; q0 < tokens; q0 += block_tokens) {
      const int nq = std::min(block_tokens, tokens - q0);
      const int rows = nq * group;
      for (int t = 0; t < nq; ++t)
        for (int j = 0; j < group; ++j) {
          const float* src = q + (q0 + t) * q_stride + static_cast<int64_t>(kvh * group + j) * d;
          float* dst = ws.q_packed.data() + static_cast<int64_t>(t * group + j) * d;
          for (int i = 0; i < d; ++i) dst[i] = (bf16 ? bf16::round(src[i]) : src[i]) * scale;
        }
      std::fill(ws.acc.begin(), ws.acc.begin() + static_cast<int64_t>(rows) * d, 0.0f);
      std::fill(ws.row_max.begin(), ws.row_max.begin() + rows, kMaskedScore);
      std::fill(ws.row_sum.begin(), ws.row_sum.begin() + rows, 0.0f);

      const int first_query_pos = pos0 + q0;
      const int last_query_pos = pos0 + q0 + nq - 1;
      for (int k0 = 0; k0 <= last_query_pos; k0 += key_block) {
        const int nk = std::min(key_block, last_query_pos + 1 - k0);
        // S = Q K^T, one GEMM per page of the block.
        for (int c = 0; c < nk; c += page_size) {
          const int n = std::min(page_size, nk - c);
          const float* keys = page_rows(pages[(k0 + c) / page_size], kvh, false);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n, d, 1.0f, ws.q_packed.data(), d, keys, d, 0.0f,
                      ws.scores.data() + c, key_block);
        }
        // Causal mask, only on blocks that reach past the first query of this block.
        if (k0 + nk - 1 > first_query_pos)
          for (int t = 0; t < nq; ++t) {
            const int visible = first_query_pos + t - k0 + 1;  // keys k0..qpos are visible
            for (int j = 0; j < group; ++j) {
              float* s = ws.scores.data() + static_cast<int64_t>(t * group + j) * key_block;
              for (int c = std::max(visible, 0); c < nk; ++c) s[c] = kMaskedScore;
            }
          }
        for (int r = 0; r < rows; ++r)
          online_softmax_step(ws.scores.data() + static_cast<int64_t>(r) * key_block, nk, ws.row_max[r], ws.row_sum[r],
                              ws.acc.data() + static_cast<int64_t>(r) * d, d);
        if (bf16)
          for (int r = 0; r < rows; ++r) bf16::round_all(ws.scores.data() + static_cast<int64_t>(r) * key_block, nk);
        // O += P V, one GEMM per page.
        for (int c = 0; c < nk; c += page_size) {
          const int n = std::min(page_size, nk - c);
          const float* values = page_rows(pages[(k0 + c) / page_size], kvh, true);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, n, 1.0f, ws.scores.data() + c, key_block,
                      values, d, 1.0f, ws.acc.data(), d);
        }
      }
      for (int t = 0; t < nq; ++t)
        for (int j = 0; j < group; ++j) {
          const int r = t * group + j;
          const float inv = 1.0f / ws.row_sum[r];
          const float* a = ws.acc.data() + static_cast<int64_t>(r) * d;
          float* dst = out + (q0 + t) * out_stride + static_cast<int64_t>(kvh * group + j) * d;
          for (int i = 0; i < d; ++i) dst[i] = a[i] * inv;
        }
    }
  }
}

}  // namespace pf::cpu
