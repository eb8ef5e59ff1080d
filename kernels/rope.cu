// Rotate-half RoPE (Hugging Face semantics). One thread per (token, frequency): the angle
// pos * inv_freq is formed and reduced in double (positions reach millions, where a float
// angle would be off by whole radians), then rotates that pair in every q and k head.
#include <cmath>

#include "common.cuh"
#include "kernels.hpp"

namespace pf::kernels {
namespace {

__global__ void rope_kernel(float* x, int rows, int64_t row_stride, int q_heads, int k_heads, int64_t k_offset,
                            int head_dim, int64_t pos0, const double* inv_freq) {
  const int half = head_dim / 2;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= static_cast<int64_t>(rows) * half) return;
  const int64_t row = item / half;
  const int i = static_cast<int>(item % half);
  double angle = static_cast<double>(pos0 + row) * inv_freq[i];
  angle = remainder(angle, 6.283185307179586476925286766559);  // to [-pi, pi]: float sincos stays exact
  float s, c;
  sincosf(static_cast<float>(angle), &s, &c);
  float* base = x + row * row_stride;
  for (int h = 0; h < q_heads + k_heads; ++h) {
    float* v = base + (h < q_heads ? static_cast<int64_t>(h) * head_dim : k_offset + static_cast<int64_t>(h - q_heads) * head_dim);
    const float a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = b * c + a * s;
  }
}

}  // namespace

void rope(float* x, int rows, int64_t row_stride, int q_heads, int k_heads, int64_t k_offset, int head_dim,
          int64_t pos0, const double* inv_freq, cudaStream_t stream) {
  const int64_t items = static_cast<int64_t>(rows) * (head_dim / 2);
  if (items <= 0) return;
  PF_LAUNCH(rope_kernel, detail::blocks_for(items, 256), 256, 0, stream, x, rows, row_stride, q_heads, k_heads, k_offset,
                                                                  head_dim, pos0, inv_freq);
}

}  // namespace pf::kernels
