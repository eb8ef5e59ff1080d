// Element-wise and row-wise CPU ops of a decoder layer (float32). Each mirrors one CUDA
// kernel in kernels/ so the two backends can be compared op by op.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.hpp"

namespace pf::cpu {

// out[t, :] = embedding[tokens[t], :]
void embed(const float* embedding, int hidden, const int32_t* tokens, int count, float* out);

// y = x / sqrt(mean(x^2) + eps) * weight, per row of `width` (rows may be strided).
void rms_norm(const float* x, int rows, int width, int row_stride, const float* weight, float eps, float* y,
              int y_stride);

// Rotate-half RoPE in place on `heads` heads of each of `rows` tokens at positions pos0..,
// cos and sin times `scale`.
void apply_rope(float* x, int rows, int row_stride, int heads, int head_dim, int pos0,
                const std::vector<double>& inv_freq, float scale = 1.0f);
// The same in two steps, for the layers that share a chunk's positions: each position's cos
// and sin (times `scale`; angles in double), [count][head_dim / 2] each, computed once;
// then the rotation of `rows` tokens with their rows of those tables.
void rope_angles(int64_t pos0, int count, int head_dim, const std::vector<double>& inv_freq, float scale, float* cos,
                 float* sin);
void apply_rope_angles(float* x, int rows, int row_stride, int heads, int head_dim, const float* cos, const float* sin);

// out[t, i] = silu(gate_up[t, i]) * gate_up[t, width + i]
void swiglu(const float* gate_up, int rows, int width, float* out);

// x[r, i] += bias[i] for `rows` rows of `width` (row stride `stride`)
void bias_add(float* x, int rows, int width, int64_t stride, const float* bias);

// x += y (n elements)
void add_inplace(float* x, const float* y, int64_t n);

// Fast exp for softmax: relative error < 2e-7 on [-87, 88], 0 below; vectorises.
void exp_inplace(float* x, int n);

}  // namespace pf::cpu
