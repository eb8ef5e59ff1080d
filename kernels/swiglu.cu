// SwiGLU: act = silu(gate) * up, read from the fused gate_up GEMM output, written as bf16
// (the down projection's input).
#include "common.cuh"
#include "kernels.hpp"

namespace pf::kernels {
namespace {

__global__ void swiglu_kernel(const float* gate_up, int rows, int width, bf16* out) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= static_cast<int64_t>(rows) * width) return;
  const int64_t row = item / width, col = item % width;
  const float g = gate_up[row * 2 * width + col], u = gate_up[row * 2 * width + width + col];
  out[item] = __float2bfloat16_rn(g / (1.0f + __expf(-g)) * u);
}

}  // namespace

void swiglu(const float* gate_up, int rows, int width, bf16* out, cudaStream_t stream) {
  const int64_t items = static_cast<int64_t>(rows) * width;
  if (items <= 0) return;
  PF_LAUNCH(swiglu_kernel, detail::blocks_for(items, 256), 256, 0, stream, gate_up, rows, width, out);
}

}  // namespace pf::kernels
