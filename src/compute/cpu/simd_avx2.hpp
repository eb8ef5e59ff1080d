// 8 float lanes of AVX2 + FMA for the kernels written over a vector type (attention_tiles.hpp).
// Included only by files compiled with -mavx2 -mfma (and without AVX-512).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace pf::cpu {

struct Avx2 {
  using reg = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kKeys = 6;                    // S^T registers: 6 keys x 2 vectors (+ 2 Q + 1 K of 16)
  static constexpr int kValueColumns = 6;            // O^T registers: 6 columns x 2 vectors
  static constexpr int kScoreStepsPerIteration = 2;  // Q.K's loop runs two head-dim steps an iteration

  static reg zero() { return _mm256_setzero_ps(); }
  static reg load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, reg v) { _mm256_storeu_ps(p, v); }
  static reg set1(float x) { return _mm256_set1_ps(x); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm256_sub_ps(a, b); }
  static reg max(reg a, reg b) { return _mm256_max_ps(a, b); }

  static reg mask_after(reg s, int32_t key_pos, const int32_t* qpos) {
    const __m256i future =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(key_pos), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qpos)));
    return _mm256_blendv_ps(s, _mm256_set1_ps(-1e30f), _mm256_castsi256_ps(future));
  }

  static reg exp(reg x) {
    const reg underflow = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
    // max/min return their second operand when one is NaN: x second, so NaN passes through.
    x = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(_mm256_set1_ps(-87.0f), x));
    const reg k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    reg r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(1.428606765330187045e-06f), r);
    reg p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
  }
};

}  // namespace pf::cpu
