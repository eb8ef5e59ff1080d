// RMSNorm: one block per row for the residual stream (float in, bf16 out for the next GEMM),
// one warp per head for Qwen3's per-head q/k norm (in place, float).
#include "common.cuh"
#include "kernels.hpp"

namespace pf::kernels {
namespace {

__global__ void rms_norm_rows_kernel(const float* x, int width, int64_t x_stride, const bf16* weight, float eps,
                                     bf16* y, int64_t y_stride) {
  const float* row = x + blockIdx.x * x_stride;
  float sum = 0.0f;
  for (int c = threadIdx.x; c < width; c += blockDim.x) sum += row[c] * row[c];
  const float inv = rsqrtf(detail::block_sum(sum) / width + eps);
  bf16* out = y + blockIdx.x * y_stride;
  for (int c = threadIdx.x; c < width; c += blockDim.x)
    out[c] = __float2bfloat16_rn(row[c] * inv * __bfloat162float(weight[c]));
}

// Block of 8 warps, a warp per (row, head).
__global__ void rms_norm_heads_kernel(float* x, int rows, int heads, int head_dim, int64_t row_stride,
                                      const bf16* weight, float eps) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (item >= static_cast<int64_t>(rows) * heads) return;
  const int lane = threadIdx.x & 31;
  float* v = x + (item / heads) * row_stride + (item % heads) * head_dim;
  float sum = 0.0f;
  for (int c = lane; c < head_dim; c += 32) sum += v[c] * v[c];
  const float inv = rsqrtf(detail::warp_sum(sum) / head_dim + eps);
  for (int c = lane; c < head_dim; c += 32) v[c] = v[c] * inv * __bfloat162float(weight[c]);
}

}  // namespace

void rms_norm_rows(const float* x, int rows, int width, int64_t x_stride, const bf16* weight, float eps, bf16* y,
                   int64_t y_stride, cudaStream_t stream) {
  if (rows <= 0) return;
  PF_LAUNCH(rms_norm_rows_kernel, rows, 256, 0, stream, x, width, x_stride, weight, eps, y, y_stride);
}

void rms_norm_heads(float* x, int rows, int heads, int head_dim, int64_t row_stride, const bf16* weight, float eps,
                    cudaStream_t stream) {
  const int64_t items = static_cast<int64_t>(rows) * heads;
  if (items <= 0) return;
  constexpr int kWarps = 8;
  PF_LAUNCH(rms_norm_heads_kernel, detail::blocks_for(items, kWarps), kWarps * 32, 0, stream, x, rows, heads, head_dim,
                                                                                      row_stride, weight, eps);
}

}  // namespace pf::kernels
