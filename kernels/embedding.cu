// Embedding gather: one block per token, float4-free plain loop (hidden sizes vary).
#include "common.cuh"
#include "kernels.hpp"

namespace pf::kernels {
namespace {

__global__ void embedding_gather_kernel(const bf16* table, int hidden, const int32_t* tokens, float* out) {
  const int64_t row = blockIdx.x;
  const bf16* src = table + static_cast<int64_t>(tokens[row]) * hidden;
  float* dst = out + row * hidden;
  for (int c = threadIdx.x; c < hidden; c += blockDim.x) dst[c] = __bfloat162float(src[c]);
}

}  // namespace

void embedding_gather(const bf16* table, int hidden, const int32_t* tokens, int count, float* out,
                      cudaStream_t stream) {
  if (count <= 0) return;
  PF_LAUNCH(embedding_gather_kernel, count, 256, 0, stream, table, hidden, tokens, out);
}

}  // namespace pf::kernels
