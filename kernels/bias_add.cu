// Bias add on GEMM outputs (Qwen2's q/k/v biases): x[r, c] += bias[c].
#include "common.cuh"
#include "kernels.hpp"

namespace pf::kernels {
namespace {

__global__ void bias_add_kernel(float* x, int rows, int width, int64_t row_stride, const bf16* bias) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= static_cast<int64_t>(rows) * width) return;
  const int64_t row = item / width;
  const int col = static_cast<int>(item % width);
  x[row * row_stride + col] += __bfloat162float(bias[col]);
}

}  // namespace

void bias_add(float* x, int rows, int width, int64_t row_stride, const bf16* bias, cudaStream_t stream) {
  const int64_t items = static_cast<int64_t>(rows) * width;
  if (items <= 0) return;
  PF_LAUNCH(bias_add_kernel, detail::blocks_for(items, 256), 256, 0, stream, x, rows, width, row_stride, bias);
}

}  // namespace pf::kernels
