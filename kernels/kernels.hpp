// Host-side launchers of the CUDA kernels, one op per .cu file beside this header. They
// enqueue on the given stream and return at once; none synchronises. Activations on the
// residual stream are float32; GEMM inputs, weights and the KV cache are bfloat16.
// This header is plain C++ (no device code), so the backend's .cpp files include it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention_shapes.hpp"

namespace pf::kernels {

using bf16 = __nv_bfloat16;

// out[t, :] = float(table[tokens[t], :])                                    (embedding.cu)
void embedding_gather(const bf16* table, int hidden, const int32_t* tokens, int count, float* out, cudaStream_t stream);

// y[r, :] = bf16(x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight)             (rmsnorm.cu)
void rms_norm_rows(const float* x, int rows, int width, int64_t x_stride, const bf16* weight, float eps, bf16* y,
                   int64_t y_stride, cudaStream_t stream);
// Per-head RMSNorm in place (Qwen3's q/k norm): `heads` heads of head_dim per row.
void rms_norm_heads(float* x, int rows, int heads, int head_dim, int64_t row_stride, const bf16* weight, float eps,
                    cudaStream_t stream);

// Rotate-half RoPE in place on the q heads at x[r, 0:] and the k heads at x[r, k_offset:]
// of each row, token r at position pos0 + r. inv_freq: [head_dim / 2] doubles on the
// device (llama3 / yarn scaling already applied); angles are formed in double; cos and sin
// are multiplied by `scale` (YaRN's attention factor, cpu::rope_scale; 1 otherwise).   (rope.cu)
void rope(float* x, int rows, int64_t row_stride, int q_heads, int k_heads, int64_t k_offset, int head_dim,
          int64_t pos0, const double* inv_freq, float scale, cudaStream_t stream);
// The same on `heads` heads at x[r, h * head_stride], each rotating its first rope_dim
// values (MLA: x points at q_rope of head 0, or at the latent row's k_rope).
void rope_heads(float* x, int rows, int64_t row_stride, int heads, int64_t head_stride, int rope_dim, int64_t pos0,
                const double* inv_freq, float scale, cudaStream_t stream);

// out[t, i] = bf16(silu(gate_up[t, i]) * gate_up[t, width + i])              (swiglu.cu)
void swiglu(const float* gate_up, int rows, int width, bf16* out, cudaStream_t stream);

// hidden[i] += delta[i]                                                      (residual_add.cu)
void residual_add(float* hidden, const float* delta, int64_t n, cudaStream_t stream);

// x[r, c] += bias[c] for c < width (q/k/v biases of Qwen2)                   (bias_add.cu)
void bias_add(float* x, int rows, int width, int64_t row_stride, const bf16* bias, cudaStream_t stream);

// The paged KV cache of one stage, on the device: page p of layer l starts at
// base + (p * layers + l) * page_layer_elements(); inside it K is
// [kv_heads][page_size][head_dim], then V the same (the CPU pool's layout, in bf16). A
// latent cache (MLA) has kv_heads 1, head_dim kv_lora + rope, and no V half (kv::KvShape).
struct PagedKv {
  bf16* base = nullptr;
  const int32_t* page_table = nullptr;  // the prompt's pages, in token order (device)
  int layers = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int page_size = 0;
  bool latent = false;
  __host__ __device__ int64_t page_layer_elements() const {
    return (latent ? 1ll : 2ll) * kv_heads * page_size * head_dim;
  }
};

// Writes K and V rows of `count` tokens at positions pos0.. of `layer` into their pages,
// as bf16. k, v: [count, kv_heads * head_dim] float rows with the given stride; v is not
// read for a latent cache (pass null).                                        (kv_append.cu)
void kv_append(const PagedKv& kv, int layer, int64_t pos0, int count, const float* k, const float* v,
               int64_t row_stride, cudaStream_t stream);

// Attention of one chunk's queries (positions pos0 .. pos0 + tokens - 1, already RoPE'd,
// float rows of q_stride) against the prompt's K/V at positions 0 .. pos0 + tokens - 1 in
// `kv` (the chunk's own K/V appended first), causally masked, GQA. Online softmax in float,
// bf16 tensor-core products; never forms a tokens x prefix matrix. out: bf16 rows.
// Needs head_dim 32, 48, 64 or 128 and page_size a multiple of 64.               (attention.cu)
struct AttentionArgs {
  const float* q = nullptr;
  int64_t q_stride = 0;
  int tokens = 0;
  int64_t pos0 = 0;
  int heads = 0;
  PagedKv kv;
  int layer = 0;
  bf16* out = nullptr;
  int64_t out_stride = 0;
};
void chunk_attention(const AttentionArgs& args, cudaStream_t stream);
// attention_supports(head_dim, page_size): attention_shapes.hpp.

// ---- Multi-head latent attention (DeepSeek), computed absorbed as the cpu backend does ----
// Splits each query head of q [tokens, heads * (nope + rope)] (after RoPE, row stride
// q_stride) for the absorbed attention: q_nope -> bf16 [tokens, heads * nope] (the W_UK
// GEMM's input), q_rope -> the last `rope` columns of each head's row of q_absorbed
// [tokens, heads * (rank + rope)], whose first `rank` columns the W_UK GEMM writes.
//                                                                          (latent_queries.cu)
void split_latent_queries(const float* q, int64_t q_stride, int tokens, int heads, int nope, int rope, int rank,
                          bf16* q_nope, float* q_absorbed, cudaStream_t stream);

// Attention of the chunk's absorbed queries over the prompt's latent cache: every head
// reads the same cached rows [latent | k_rope] (kv.head_dim wide) as keys, and their first
// `value_width` columns (the latent) as values. q: [tokens, heads * kv.head_dim] float rows
// of q_stride; scores times `scale` (config.softmax_scale()), causal over positions 0 ..
// pos0 + tokens - 1, online softmax in float. out: bf16 [tokens, heads * value_width] rows
// of out_stride. A plain CUDA-core kernel, any width up to latent_attention_max_width().
//                                                                        (latent_attention.cu)
struct LatentAttentionArgs {
  const float* q = nullptr;
  int64_t q_stride = 0;
  int tokens = 0;
  int64_t pos0 = 0;
  int heads = 0;
  PagedKv kv;  // latent
  int layer = 0;
  float scale = 0;
  int value_width = 0;
  bf16* out = nullptr;
  int64_t out_stride = 0;
};
void latent_attention(const LatentAttentionArgs& args, cudaStream_t stream);
int latent_attention_max_width();
// The shared memory a block of it takes on rows `width` wide with `value_width` value columns:
// above 48 KiB it opts in, which a GPU allows up to its sharedMemPerBlockOptin (99 KiB on
// sm_86 and sm_89, 163 KiB on sm_80, 227 KiB on sm_90).
size_t latent_attention_shared_bytes(int width, int value_width);

// ---- Context parallelism: a CP rank's partial attention and the merge (src/compute/cpu/
// ring_attention.hpp is the same on the CPU) ----
// Queries q [rows, heads * key_width] (float rows of q_stride, after RoPE) over one CP rank's
// packed shard: keys bf16 [kv_heads][n][key_width], values bf16 [kv_heads][n] rows of
// value_row_stride whose first value_width columns are the values (GQA: their own array,
// stride value_width; MLA's absorbed attention: the keys themselves, one kv head, stride
// key_width). Row i sees the shard's first visible[i] keys (device memory, non-decreasing in
// i: a rank's rows in position order over a shard sorted by position); scores times `scale`;
// head h reads kv head h / (heads / kv_heads). out: float [rows, heads * value_width] rows of
// out_stride, normalized by each row's softmax sum; lse [rows, heads]: that sum's natural log
// in units of the scaled scores (-inf, with a zero row, where a row sees no key). Widths up
// to partial_attention_max_width().                                        (ring_attention.cu)
struct PartialAttentionArgs {
  const float* q = nullptr;
  int64_t q_stride = 0;
  int rows = 0;
  int heads = 0;
  const bf16* keys = nullptr;
  const bf16* values = nullptr;
  int n = 0;
  int kv_heads = 0;
  int key_width = 0;
  int value_width = 0;
  int64_t value_row_stride = 0;
  const int32_t* visible = nullptr;
  float scale = 0;
  float* out = nullptr;
  int64_t out_stride = 0;
  float* lse = nullptr;
};
void partial_attention(const PartialAttentionArgs& args, cudaStream_t stream);
// The tensor-core tiles of chunk_attention on a grouped-query shard (head_dim 32, 48, 64 or
// 128, values rows of their own): launched, and true; false where they do not fit, for the
// CUDA-core kernel to run instead.                                        (attention.cu)
bool partial_attention_on_tiles(const PartialAttentionArgs& args, cudaStream_t stream);
int partial_attention_max_width();
// Whether a partial with keys `key_width` and values `value_width` wide fits a block's shared
// memory on the GPUs the latent kernel runs on (MLA's latent rows are wider than the max above).
bool partial_attention_fits(int key_width, int value_width);
// The shared memory a block of the CUDA-core partial kernel takes at those widths (the
// device's opt-in limit must hold it; partial_attention_fits is the kernel's own budget).
size_t partial_attention_shared_bytes(int key_width, int value_width);
// The running merge out [rows, heads * head_width] (contiguous) and lse [rows, heads] merged
// with a partial (part, rows of part_stride; part_lse): L = log(e^L1 + e^L2),
// O = e^(L1 - L) O1 + e^(L2 - L) O2; a partial that saw no key (-inf) changes nothing.
//                                                                         (ring_attention.cu)
void merge_partial(float* out, float* lse, const float* part, int64_t part_stride, const float* part_lse, int rows,
                   int heads, int head_width, cudaStream_t stream);
// A CP rank's first `rows` cached rows of `layer` (the prompt's pages in kv.page_table, in
// order) packed as the shard the ring moves: keys bf16 [kv_heads][rows][head_dim], then the
// values the same (a latent cache: its rows alone).                         (ring_attention.cu)
void pack_kv_rows(const PagedKv& kv, int layer, int64_t rows, bf16* shard, cudaStream_t stream);

// ---- Mixture of experts ----
// Each token's top-k experts (best first) and their weights, from its normed row x and
// the float32 router: softmax top-k, or DeepSeek-V3's sigmoid scores chosen with the
// correction bias among the topk_groups best groups (a group's score: its best two). Then
// optional renormalisation and the routed scaling factor: cpu::choose_experts' rules,
// ties to the lower index.                                                 (moe_router.cu)
struct RouterArgs {
  const bf16* x = nullptr;  // [tokens, hidden]
  int tokens = 0;
  int hidden = 0;
  const float* weight = nullptr;           // [experts, hidden]
  const float* correction_bias = nullptr;  // [experts], or null
  int experts = 0;
  int k = 0;
  bool sigmoid_grouped = false;
  int groups = 1;
  int topk_groups = 1;
  bool renormalize = false;
  float scaling = 1.0f;
  int32_t* expert = nullptr;       // [tokens, k]
  float* expert_weight = nullptr;  // [tokens, k]
};
void route_tokens(const RouterArgs& args, cudaStream_t stream);
bool router_supports(int experts, int k, int groups);

// The (token, choice) slots [tokens * k] grouped by expert, a stable counting sort (tokens
// in order inside each expert, as the cpu backend's): first_slot [experts + 1] (expert e's
// slots are slot_of[first_slot[e] .. first_slot[e + 1])), and for each slot its row in that
// order, row_of_slot. One block.                                            (moe_group.cu)
void group_by_expert(const int32_t* expert, int slots, int experts, int32_t* first_slot, int32_t* slot_of,
                     int32_t* row_of_slot, cudaStream_t stream);

// rows[r, :] = x[slot_of[r] / k, :] for r < slots: each expert's tokens, gathered.  (moe_rows.cu)
void gather_expert_rows(const bf16* x, int hidden, const int32_t* slot_of, int slots, int k, bf16* rows,
                        cudaStream_t stream);
// out[t, :] = sum over i < k of weight[t * k + i] * expert_out[row_of_slot[t * k + i], :]:
// the experts' outputs weighted back into token order (written, not added).
void combine_experts(const float* expert_out, int hidden, const int32_t* row_of_slot, const float* weight, int tokens,
                     int k, float* out, cudaStream_t stream);
// out[t, :] += sigmoid(x[t, :] . gate) * src[t, :] (Qwen2-MoE's gated shared expert; gate float32).
void add_sigmoid_gated(float* out, const float* src, const bf16* x, const float* gate, int rows, int hidden,
                       cudaStream_t stream);

// Conversions used when weights are uploaded or filled on the device.     (convert.cu)
void float_to_bf16(const float* in, bf16* out, int64_t n, cudaStream_t stream);
// Fills with a hash of (seed, index) uniform in [-scale, scale]: benchmarks' weights.
void fill_uniform_bf16(bf16* out, int64_t n, uint64_t seed, float scale, cudaStream_t stream);

// Launch failures are reported through the usual CUDA error state; callers check
// cudaGetLastError() after each launcher (CUDA_CHECK_LAUNCH in device/cuda_check.hpp).

// --logprobs, --top-k, --token-ids: row r of logits [rows, count] (this rank's vocabulary
// slice, token ids vocab_begin...) summarized into records [rows] of compute::RowSummaryHeader,
// k compute::RowCandidate and the logits of token_set [set_size] (device memory, global ids;
// NaN for those outside the slice), compute::row_summary_bytes apart (compute/vocab_scores.hpp);
// targets [rows] are the tokens whose logit each row keeps (global ids, -1: none; may be null).
//                                                                            (vocab_summary.cu)
void vocab_summaries(const float* logits, int rows, int count, int vocab_begin, const int32_t* targets, int k,
                     const int32_t* token_set, int set_size, void* records, cudaStream_t stream);

}  // namespace pf::kernels
