// CPU element-wise ops. Plain loops written so GCC vectorises them at -O3 -march=native.
#include "compute/cpu/elementwise.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace pf::cpu {

namespace {

// exp(v) = 2^k * exp(r), k = round(v / ln2), |r| <= ln2/2, exp(r) by a degree-6 polynomial.
// Relative error < 2e-7 on [-87, 88], exactly 0 below; inlined, so loops around it vectorise.
inline float fast_exp(float v) {
  const bool underflow = v < -87.0f;
  v = v > 88.0f ? 88.0f : (underflow ? -87.0f : v);
  const float k = std::nearbyint(v * 1.44269504088896341f);
  const float r = (v - k * 0.693145751953125f) - k * 1.428606765330187045e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return underflow ? 0.0f : p * scale;
}

}  // namespace

void embed(const float* embedding, int hidden, const int32_t* tokens, int count, float* out) {
  for (int t = 0; t < count; ++t)
    std::memcpy(out + static_cast<int64_t>(t) * hidden, embedding + static_cast<int64_t>(tokens[t]) * hidden,
                sizeof(float) * hidden);
}

void rms_norm(const float* x, int rows, int width, int row_stride, const float* weight, float eps, float* y,
              int y_stride) {
  for (int r = 0; r < rows; ++r) {
    const float* in = x + static_cast<int64_t>(r) * row_stride;
    float* out = y + static_cast<int64_t>(r) * y_stride;
    float sum = 0.0f;
    for (int i = 0; i < width; ++i) sum += in[i] * in[i];
    const float scale = 1.0f / std::sqrt(sum / static_cast<float>(width) + eps);
    for (int i = 0; i < width; ++i) out[i] = in[i] * scale * weight[i];
  }
}

void rope_angles(int64_t pos0, int count, int head_dim, const std::vector<double>& inv_freq, float scale, float* cos,
                 float* sin) {
  const int64_t half = head_dim / 2;
  for (int r = 0; r < count; ++r) {
    // Angles in double: at positions near 1M a float32 product loses ~0.06 rad.
    const double pos = static_cast<double>(pos0 + r);
    for (int64_t i = 0; i < half; ++i) {
      const double angle = pos * inv_freq[i];
      cos[r * half + i] = static_cast<float>(std::cos(angle)) * scale;
      sin[r * half + i] = static_cast<float>(std::sin(angle)) * scale;
    }
  }
}

void apply_rope_angles(float* x, int rows, int row_stride, int heads, int head_dim, const float* cos,
                       const float* sin) {
  const int half = head_dim / 2;
  for (int r = 0; r < rows; ++r) {
    const float* c = cos + static_cast<int64_t>(r) * half;
    const float* s = sin + static_cast<int64_t>(r) * half;
    float* row = x + static_cast<int64_t>(r) * row_stride;
    for (int h = 0; h < heads; ++h) {
      float* v = row + h * head_dim;
      for (int i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * c[i] - b * s[i];
        v[i + half] = b * c[i] + a * s[i];
      }
    }
  }
}

void apply_rope(float* x, int rows, int row_stride, int heads, int head_dim, int pos0,
                const std::vector<double>& inv_freq, float scale) {
  const int half = head_dim / 2;
  std::vector<float> cos_v(half), sin_v(half);
  for (int r = 0; r < rows; ++r) {
    rope_angles(pos0 + r, 1, head_dim, inv_freq, scale, cos_v.data(), sin_v.data());
    apply_rope_angles(x + static_cast<int64_t>(r) * row_stride, 1, row_stride, heads, head_dim, cos_v.data(),
                      sin_v.data());
  }
}

void swiglu(const float* gate_up, int rows, int width, float* out) {
  for (int r = 0; r < rows; ++r) {
    const float* gate = gate_up + static_cast<int64_t>(r) * 2 * width;
    const float* up = gate + width;
    float* o = out + static_cast<int64_t>(r) * width;
    for (int i = 0; i < width; ++i) o[i] = gate[i] / (1.0f + fast_exp(-gate[i])) * up[i];
  }
}

void bias_add(float* x, int rows, int width, int64_t stride, const float* bias) {
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < width; ++i) x[r * stride + i] += bias[i];
}

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void exp_inplace(float* x, int n) {
  for (int i = 0; i < n; ++i) x[i] = fast_exp(x[i]);
}

}  // namespace pf::cpu
