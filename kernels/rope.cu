// Rotate-half RoPE (Hugging Face semantics). One thread per (token, frequency): the angle
// pos * inv_freq is formed and reduced in double (positions reach millions, where a float
// angle would be off by whole radians), then rotates that pair in every head it is given.
// Two kinds of head sets: q and k heads of the fused qkv rows (dense attention), and any
// heads at a stride (MLA: the rope tail of each query head, the latent's shared rope key).
#include <cmath>

#include "common.cuh"
#include "kernels.hpp"

namespace pf::kernels {
namespace {

// Two runs of heads per row: `first_heads` at x[r, h * first_stride], then `second_heads`
// at x[r, second_offset + h * second_stride]; each head's rotated part is rope_dim wide.
// cos and sin are multiplied by `scale` (YaRN's attention factor; 1 otherwise).
__global__ void rope_kernel(float* x, int rows, int64_t row_stride, int first_heads, int64_t first_stride,
                            int second_heads, int64_t second_offset, int64_t second_stride, int rope_dim, int64_t pos0,
                            const double* inv_freq, float scale) {
  const int half = rope_dim / 2;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= static_cast<int64_t>(rows) * half) return;
  const int64_t row = item / half;
  const int i = static_cast<int>(item % half);
  double angle = static_cast<double>(pos0 + row) * inv_freq[i];
  angle = remainder(angle, 6.283185307179586476925286766559);  // to [-pi, pi]: float sincos stays exact
  float s, c;
  sincosf(static_cast<float>(angle), &s, &c);
  s *= scale;
  c *= scale;
  float* base = x + row * row_stride;
  for (int h = 0; h < first_heads + second_heads; ++h) {
    float* v = base + (h < first_heads ? h * first_stride : second_offset + (h - first_heads) * second_stride);
    const float a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = b * c + a * s;
  }
}

void launch_rope(float* x, int rows, int64_t row_stride, int first_heads, int64_t first_stride, int second_heads,
                 int64_t second_offset, int64_t second_stride, int rope_dim, int64_t pos0, const double* inv_freq,
                 float scale, cudaStream_t stream) {
  const int64_t items = static_cast<int64_t>(rows) * (rope_dim / 2);
  if (items <= 0) return;
  PF_LAUNCH(rope_kernel, detail::blocks_for(items, 256), 256, 0, stream, x, rows, row_stride, first_heads,
            first_stride, second_heads, second_offset, second_stride, rope_dim, pos0, inv_freq, scale);
}

}  // namespace

void rope(float* x, int rows, int64_t row_stride, int q_heads, int k_heads, int64_t k_offset, int head_dim,
          int64_t pos0, const double* inv_freq, float scale, cudaStream_t stream) {
  launch_rope(x, rows, row_stride, q_heads, head_dim, k_heads, k_offset, head_dim, head_dim, pos0, inv_freq, scale,
              stream);
}

void rope_heads(float* x, int rows, int64_t row_stride, int heads, int64_t head_stride, int rope_dim, int64_t pos0,
                const double* inv_freq, float scale, cudaStream_t stream) {
  launch_rope(x, rows, row_stride, heads, head_stride, 0, 0, 0, rope_dim, pos0, inv_freq, scale, stream);
}

}  // namespace pf::kernels
