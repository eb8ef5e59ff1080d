// Residual add on the float32 residual stream, four elements a thread where aligned.
#include "common.cuh"
#include "kernels.hpp"

namespace pf::kernels {
namespace {

__global__ void residual_add4_kernel(float4* hidden, const float4* delta, int64_t n4) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  float4 h = hidden[i];
  const float4 d = delta[i];
  h.x += d.x;
  h.y += d.y;
  h.z += d.z;
  h.w += d.w;
  hidden[i] = h;
}

__global__ void residual_add_kernel(float* hidden, const float* delta, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) hidden[i] += delta[i];
}

}  // namespace

void residual_add(float* hidden, const float* delta, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  const bool aligned = (reinterpret_cast<uintptr_t>(hidden) | reinterpret_cast<uintptr_t>(delta)) % 16 == 0;
  if (aligned && n % 4 == 0) {
    PF_LAUNCH(residual_add4_kernel, detail::blocks_for(n / 4, 256), 256, 0, stream, reinterpret_cast<float4*>(hidden), reinterpret_cast<const float4*>(delta), n / 4);
  } else {
    PF_LAUNCH(residual_add_kernel, detail::blocks_for(n, 256), 256, 0, stream, hidden, delta, n);
  }
}

}  // namespace pf::kernels
