// MLA's queries, split for the absorbed attention (see kernels.hpp): q_nope to bf16 for the
// W_UK GEMM, q_rope beside the latent part that GEMM writes.
#include "common.cuh"
#include "kernels.hpp"

namespace pf::kernels {
namespace {

// One thread per (token, head, column of nope + rope).
__global__ void split_latent_queries_kernel(const float* q, int64_t q_stride, int tokens, int heads, int nope,
                                            int rope, int rank, bf16* q_nope, float* q_absorbed) {
  const int qk = nope + rope;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= static_cast<int64_t>(tokens) * heads * qk) return;
  const int64_t token = item / (static_cast<int64_t>(heads) * qk);
  const int head = static_cast<int>(item / qk % heads);
  const int col = static_cast<int>(item % qk);
  const float value = q[token * q_stride + static_cast<int64_t>(head) * qk + col];
  if (col < nope)
    q_nope[(token * heads + head) * nope + col] = __float2bfloat16_rn(value);
  else
    q_absorbed[(token * heads + head) * (rank + rope) + rank + (col - nope)] = value;
}

}  // namespace

void split_latent_queries(const float* q, int64_t q_stride, int tokens, int heads, int nope, int rope, int rank,
                          bf16* q_nope, float* q_absorbed, cudaStream_t stream) {
  const int64_t items = static_cast<int64_t>(tokens) * heads * (nope + rope);
  if (items <= 0) return;
  PF_LAUNCH(split_latent_queries_kernel, detail::blocks_for(items, 256), 256, 0, stream, q, q_stride, tokens, heads,
            nope, rope, rank, q_nope, q_absorbed);
}

}  // namespace pf::kernels
