// Context-parallel attention on the GPU (compute/cpu/ring_attention.hpp is the CPU's, with
// the same split and the same exchanges): a CP rank's queries against the prompt's keys,
// spread over the stage's CP ranks by token, exact by partial outputs merged by their
// log-sum-exps (kernels/ring_attention.cu), over a dist::CpRing of device buffers
// (dist/device_cp_ring.hpp: NCCL on the forward stream, or staged through the host).
//   pass-KV: the rank packs its shard of the layer (bf16 K then V, kernels::pack_kv_rows; a
//            latent cache's rows alone) and passes it round the ring, attending to the
//            shard it holds at each step;
//   pass-Q:  the chunk's queries are gathered, each rank attends all of them to its own
//            shard, and the partials with their log-sum-exps go back to their owners.
// Everything is enqueued on the forward stream; with NCCL the host never waits.
// Grouped-query attention's heads read head_dim-wide keys and give head_dim-wide outputs;
// MLA's, in the absorbed form the single-rank kernel uses (latent_on_gpu.hpp), read the
// latent rows (kv_lora + rope wide) as keys and their first kv_lora columns as values, and
// give kv_lora-wide outputs, which the caller carries out through W_UV after the merge.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <vector>

#include "compute/cpu/ring_attention.hpp"  // RingChunk: what a CP rank knows of a chunk
#include "device/device_array.hpp"
#include "dist/cp_ring.hpp"
#include "kernels/kernels.hpp"
#include "kvcache/paged_kv_pool.hpp"

namespace pf::cuda {

class RingOnGpu {
 public:
  // `upload(device, host, bytes)`: a host -> device copy in forward-stream order.
  using Upload = std::function<void(void* device, const void* host, size_t bytes)>;
  RingOnGpu(dist::CpRing& ring, cudaStream_t forward, Upload upload);

  // The largest buffers the batch can need, allocated now so that the KV pool is sized from
  // the memory left after them: two shards of a layer's cache of `shard_rows` rows (the
  // most any rank holds of a prompt; `kv` its shape), and pass-Q's gathered queries and
  // partials for chunks of at most `max_chunk` tokens, `heads` heads giving `value_width`.
  void reserve(int64_t shard_rows, int max_chunk, const kv::KvShape& kv, int heads, int value_width);
  // Before a chunk's layers: how many of every rank's cached rows each query sees (the same
  // in every layer), uploaded once.
  void begin_chunk(const cpu::RingChunk& chunk);
  // One layer's attention of this rank's rows: q [rows, heads * kv.head_dim] float rows of
  // q_stride against every rank's keys, this rank's the first `local_rows` cached rows of
  // `layer` in `kv`. Returns the output, float [rows, heads * value_width] (contiguous, on
  // the device, in forward-stream order; valid until the next call).
  const float* attend(const float* q, int64_t q_stride, const kernels::PagedKv& kv, int layer, int64_t local_rows,
                      int heads, int value_width, float scale);

 private:
  void partial(const float* q, int64_t q_stride, int rows, const int32_t* visible, const kernels::bf16* shard, int n,
               const kernels::PagedKv& kv, float scale, float* out, int64_t out_stride, float* lse);
  void pass_kv(const float* q, int64_t q_stride, const kernels::PagedKv& kv, float scale);
  void pass_q(const float* q, int64_t q_stride, const kernels::PagedKv& kv, float scale);
  int64_t shard_floats(const kernels::PagedKv& kv, int rank) const;  // (bf16 pairs: head_dim is even)

  dist::CpRing& ring_;
  cudaStream_t forward_;
  Upload upload_;
  const cpu::RingChunk* chunk_ = nullptr;
  int rows_ = 0;                       // this rank's query rows of the chunk
  int heads_ = 0, value_width_ = 0;    // the current layer's (attend's arguments)
  std::vector<int> owner_rows_;        // pass-Q: each rank's query rows, in rank order
  std::vector<int32_t> visible_host_;  // pass-KV: [owner][rows]; pass-Q: [owner's rows] against this shard
  DeviceArray<int32_t> visible_;
  DeviceArray<kernels::bf16> shard_, incoming_;
  DeviceArray<float> out_, lse_, part_, part_lse_, queries_, mine_, partials_, returned_;
};

}  // namespace pf::cuda
