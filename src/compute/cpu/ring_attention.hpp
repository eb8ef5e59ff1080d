// Context-parallel attention on the CPU: a CP rank's queries (its rows of the chunk) against
// the prompt's keys, which are spread over the stage's CP ranks by token (sched/
// context_split.hpp), exact: each block of keys gives a partial output normalized by its
// own softmax sum, with that sum's log (log-sum-exp), and the partials merge exactly:
//   L = log(e^L1 + e^L2),   O = e^(L1 - L) O1 + e^(L2 - L) O2
// The causal mask is by position: a rank's keys are sorted by position, so query row i sees
// a prefix of each block (`visible[i]` keys), whichever rank's it is.
#pragma once

#include <cstdint>
#include <vector>

#include "compute/cpu/attention.hpp"
#include "dist/cp_ring.hpp"
#include "kvcache/paged_kv_pool.hpp"
#include "sched/context_split.hpp"

namespace pf::cpu {

struct PartialScratch {
  std::vector<float> q_packed, scores, acc, row_max, row_sum;
};

struct PartialWorkspace {
  AttentionWorkspace kernels;            // the hand-written kernels' (attention.hpp)
  std::vector<PartialScratch> portable;  // the sgemm path's, one per thread of the rank's pool
  std::vector<int32_t> last_key;
};

struct RingWorkspace {
  PartialWorkspace partial_ws;         // partial_attention's (GqaRingKeys)
  std::vector<float> shard, incoming;  // a rank's packed K | V (pass-KV: the ring's two buffers)
  std::vector<float> queries, partial, returned;
  std::vector<float> out, lse, block_lse;  // the merged output and its log-sum-exp
  std::vector<int32_t> visible;
};

// Queries q [m, heads * head_dim] (row stride q_stride), row i seeing the first visible[i]
// keys of k and v (each [kv_heads][n][head_dim]); GQA as chunk_attention. out [m, heads *
// head_dim] (row stride out_stride) normalized by each row's softmax sum, lse [m, heads] that
// sum's natural log in units of the scaled scores (-inf, with a zero row, where a row sees no
// key). On this CPU's attention kernel (attention.hpp: attend_packed_shard, whose rounding a
// bf16 cache asks for with `round_bf16`) when visible is non-decreasing, as a rank's rows in
// position order see a shard sorted by position; else, or where no kernel fits, or with
// `portable`, on sgemm.
void partial_attention(const float* q, int64_t q_stride, int m, const int32_t* visible, int heads, const float* k,
                       const float* v, int n, int kv_heads, int head_dim, float scale, float* out, int64_t out_stride,
                       float* lse, PartialWorkspace& ws, bool round_bf16 = false, bool portable = false);

// out/lse (the running merge, [m, heads * head_dim] and [m, heads]) merged with a partial
// (part/part_lse, the same shapes; part's row stride part_stride).
void merge_partial(float* out, float* lse, const float* part, int64_t part_stride, const float* part_lse, int m,
                   int heads, int head_dim);

// What a CP ring attends with, one layer's: the rows a rank packs of its cached keys (its
// shard), and the partial attention of queries to one rank's packed shard. Grouped-query
// attention packs K | V (GqaRingKeys, below); multi-head latent attention its latent rows,
// expanded where they are attended (latent_attention.hpp: LatentRingKeys).
class RingKeys {
 public:
  virtual ~RingKeys() = default;
  virtual sched::CpWidths widths() const = 0;  // query, shard and output widths
  // This rank's first `rows` cached rows of the layer, packed.
  virtual void pack(int64_t rows, std::vector<float>& shard) const = 0;
  // Queries q [m] (row stride q_stride), row i seeing the first visible[i] of the shard's n
  // rows (non-decreasing in i): out [m, heads * head_out] (row stride out_stride) normalized
  // by each row's softmax sum, lse [m, heads] its natural log in units of the scaled scores
  // (-inf, with a zero row, where a row sees no key).
  virtual void attend(const float* q, int64_t q_stride, int m, const int32_t* visible, const float* shard, int n,
                      float* out, int64_t out_stride, float* lse) = 0;
};

// Grouped-query attention's: K [kv_heads][rows][head_dim] then V, attended by partial_attention.
class GqaRingKeys final : public RingKeys {
 public:
  GqaRingKeys(const kv::KvLayerView& kv, int heads, float scale, PartialWorkspace& ws);
  sched::CpWidths widths() const override;
  void pack(int64_t rows, std::vector<float>& shard) const override;
  void attend(const float* q, int64_t q_stride, int m, const int32_t* visible, const float* shard, int n, float* out,
              int64_t out_stride, float* lse) override;

 private:
  kv::KvLayerView kv_;
  int heads_;
  float scale_;
  PartialWorkspace& ws_;
};

// What a CP rank knows of one chunk's layer: its queries' positions, every rank's cached
// rows of the prompt (this chunk's included), how it attends.
struct RingChunk {
  sched::CpShare mine;                                            // this rank's query rows
  const std::vector<std::vector<sched::RowRun>>* rows = nullptr;  // [cp rank]: its KV rows, by position
  sched::CpAttention variant = sched::CpAttention::kPassKv;       // pass-KV or pass-Q (not auto)
  int tokens = 0;                                                 // the chunk's tokens over every rank
  int64_t start = 0;                                              // its first position
};

// kAttention of this rank's rows: q [rows, widths().query] (stride q_stride) against the
// prompt's keys held by every CP rank, this rank's its first local_rows cached rows, packed
// and attended by `keys`; out [rows, heads * head_out] (stride out_stride).
void ring_attention(const float* q, int64_t q_stride, const RingChunk& chunk, RingKeys& keys, int64_t local_rows,
                    dist::CpRing& ring, float* out, int64_t out_stride, RingWorkspace& ws);

}  // namespace pf::cpu
