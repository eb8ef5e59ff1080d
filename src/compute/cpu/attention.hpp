// Chunk attention on the CPU: the queries of one chunk against that prompt's paged K/V
// (the prefix and the chunk itself, causally masked). Blocked with an online softmax, so
// memory is O(query block x key block), never O(prompt length^2).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compute/cpu/attention_kernels.hpp"
#include "compute/cpu/cpu_features.hpp"
#include "kvcache/paged_kv_pool.hpp"

namespace pf::cpu {

struct AttentionWorkspace {
  std::vector<TileScratch> threads;  // the kernels': one per thread of the rank's pool
  // The portable path's:
  std::vector<float> q_packed;  // [query rows, head_dim], pre-scaled by 1/sqrt(head_dim)
  std::vector<float> scores;    // [query rows, key block]
  std::vector<float> acc;       // [query rows, head_dim]
  std::vector<float> row_max, row_sum;
  std::vector<float> page_rows;  // one page of a bf16 cache, widened
};

// q: [tokens, heads * head_dim] (row stride q_stride), already RoPE'd, tokens at positions
// pos0..pos0+tokens-1, whose K/V are already written to `kv`. GQA: query head j uses KV
// head j / (heads / kv_heads). out: [tokens, heads * head_dim] (row stride out_stride).
void chunk_attention(const float* q, int64_t q_stride, int tokens, int pos0, const kv::KvLayerView& kv, int heads,
                     float* out, int64_t out_stride, AttentionWorkspace& ws);
// The same with the softmax scale given (MLA: 1/sqrt(q.k width) with YaRN's correction,
// while the latent cache is wider than q.k). The values are head_dim wide like the keys.
void chunk_attention_scaled(const float* q, int64_t q_stride, int tokens, int pos0, const kv::KvLayerView& kv,
                            int heads, float scale, float* out, int64_t out_stride, AttentionWorkspace& ws);
// The same on the path of `isa` (which must be available), rather than kernel_isa()'s: the
// tests and benchmarks compare the paths in one process. kPortable is the sgemm path. A bf16
// pool on kAvx512 computes on vdpbf16ps where `bf16_dot` says so (by default: where the bf16
// GEMMs do, gemm.hpp's measured choice; true only where bf16_dot_available()).
void chunk_attention_on(Isa isa, const float* q, int64_t q_stride, int tokens, int pos0, const kv::KvLayerView& kv,
                        int heads, float scale, float* out, int64_t out_stride, AttentionWorkspace& ws,
                        std::optional<bool> bf16_dot = std::nullopt);

// Context parallelism (ring_attention.cpp): queries q [tokens] (row stride q_stride), token i
// seeing keys 0..last_key[i] (non-decreasing, each >= 0) of one rank's shard packed as
// [kv_heads][rows][head_dim] (keys, then values alike), on this CPU's float kernel: out
// normalized, lse [tokens, heads] each row's log-sum-exp of its scaled scores. `round_bf16`:
// the rounding of a bf16 cache's attention (Q and P). False, touching nothing, when no kernel
// fits this CPU and head size (the caller's portable path).
bool attend_packed_shard(const float* q, int64_t q_stride, int tokens, const int32_t* last_key, const float* keys,
                         const float* values, int64_t rows, int heads, int kv_heads, int head_dim, float scale,
                         bool round_bf16, float* out, int64_t out_stride, float* lse, AttentionWorkspace& ws);

// Masked scores: finite, so that exp underflows to exactly 0 and no inf - inf arises.
constexpr float kMaskedScore = -1e30f;

// One key block of the online softmax for one query row: `scores` [n] (masked entries at
// kMaskedScore) become exp(score - new running max), and the row's running max, sum and
// accumulator `acc` [width] are rescaled to that max. The caller then adds P . V to `acc`.
void online_softmax_step(float* scores, int n, float& row_max, float& row_sum, float* acc, int width);

// The kernel attention runs for this head size on this CPU (kernel_isa(), and with a bf16 pool
// where the bf16 GEMMs run on vdpbf16ps, except on the context-parallel ring, whose shards take
// the float kernels: ring_attention.cpp), for the run's header: "avx512", "avx2",
// "avx512-bf16 (vdpbf16ps)", "portable (sgemm)" or "portable (sgemm: no kernel for head size d)".
std::string attention_kernel_name(int head_dim, bool bf16_pool, bool context_parallel);

// FLOPs of chunk_attention (QK^T and PV, 2 each per multiply-add) for FLOP-rate reports.
double chunk_attention_flops(int tokens, int pos0, int heads, int head_dim);

}  // namespace pf::cpu
