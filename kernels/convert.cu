// float -> bf16 (weight upload) and a deterministic hash fill (benchmark weights made on
// the device, so an 8B-parameter model needs no host-side generation).
#include "common.cuh"
#include "kernels.hpp"

namespace pf::kernels {
namespace {

__global__ void float_to_bf16_kernel(const float* in, bf16* out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16_rn(in[i]);
}

// SplitMix64 of (seed, index): independent, reproducible, no state.
__device__ __forceinline__ uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void fill_uniform_kernel(bf16* out, int64_t n, uint64_t seed, float scale) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float unit = static_cast<float>(mix(seed * 0x100000001b3ull + static_cast<uint64_t>(i)) >> 40) *
                     (1.0f / 16777216.0f);  // [0, 1)
  out[i] = __float2bfloat16_rn((2.0f * unit - 1.0f) * scale);
}

}  // namespace

void float_to_bf16(const float* in, bf16* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  PF_LAUNCH(float_to_bf16_kernel, detail::blocks_for(n, 256), 256, 0, stream, in, out, n);
}

void fill_uniform_bf16(bf16* out, int64_t n, uint64_t seed, float scale, cudaStream_t stream) {
  if (n <= 0) return;
  PF_LAUNCH(fill_uniform_kernel, detail::blocks_for(n, 256), 256, 0, stream, out, n, seed, scale);
}

}  // namespace pf::kernels
