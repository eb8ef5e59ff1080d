// The hand-written attention kernels' interface: one unit of work is the GQA group of one KV
// head against a block of the chunk's queries (see attention_tiles.hpp for how it is done).
// One definition per ISA, each in a file compiled for that ISA only (attention_avx512.cpp,
// attention_avx2.cpp); attention.cpp picks one at run time (cpu_features.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include "kvcache/paged_kv_pool.hpp"

namespace pf::cpu {

struct QueryBlock {
  const float* q = nullptr;  // the chunk's queries [tokens, heads * head_dim], RoPE'd
  int64_t q_stride = 0;
  float* out = nullptr;  // [tokens, heads * head_dim]
  int64_t out_stride = 0;
  const kv::KvLayerView* kv = nullptr;  // (null with packed keys)
  int head_dim = 0;
  int kv_head = 0, group = 1;       // query heads kv_head * group .. + group - 1
  int first_token = 0, tokens = 0;  // the block's tokens within the chunk
  int pos0 = 0;                     // position of the chunk's first token
  float scale = 1.0f;               // softmax scale, folded into Q
  // A bf16 cache (--dtype bf16) rounds where the cuda kernel does: Q and the probabilities P
  // to bf16 before their products (whose sums stay float32).
  bool bf16 = false;
  // Context parallelism (ring_attention.hpp), all optional (the float kernels only):
  //  - last_key [chunk tokens]: the last key each token sees, non-decreasing, >= 0 (instead of
  //    the causal pos0 + token): a rank's queries against a shard of keys sorted by position;
  //  - packed_keys / packed_values: the keys as [kv_heads][packed_rows][head_dim] blocks
  //    instead of the pool's pages (kv still gives the shape);
  //  - lse [chunk tokens][lse_stride]: each row's log-sum-exp of its scaled scores, beside out.
  const int32_t* last_key = nullptr;
  const float* packed_keys = nullptr;
  const float* packed_values = nullptr;
  int64_t packed_rows = 0;
  float* lse = nullptr;
  int64_t lse_stride = 0;
};

// Per-thread scratch, grown on demand and kept between calls; float buffers start 64-byte
// aligned (the kernels' loads are unaligned anyway).
class TileScratch {
 public:
  float* floats(int slot, size_t n);  // slot 0..kSlots-1: one buffer each
  int32_t* positions(size_t n);

  static constexpr int kSlots = 7;

 private:
  std::vector<float> buffers_[kSlots];
  std::vector<int32_t> positions_;
};

// Whether a kernel takes this head size: AVX-512's 8 value columns a register pass must divide
// it; AVX2's passes of 6 end with one of 2 or 4, so any even head size.
bool avx512_attention_fits(int head_dim);
bool avx2_attention_fits(int head_dim);
void attend_query_block_avx512(const QueryBlock& block, TileScratch& scratch);
void attend_query_block_avx2(const QueryBlock& block, TileScratch& scratch);

// A bf16 pool's attention on vdpbf16ps (attention_bf16_dot.cpp): the same tiles, with Q.K
// and P.V computed on bf16 pairs, two products a lane and instruction. attention.cpp takes it
// where the bf16 GEMMs run on vdpbf16ps (gemm.hpp: the same measured choice) and it fits.
bool bf16_dot_attention_fits(int head_dim);
void attend_query_block_bf16_dot(const QueryBlock& block, TileScratch& scratch);

}  // namespace pf::cpu
