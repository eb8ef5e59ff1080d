// 16 float lanes of AVX-512F for the kernels written over a vector type (attention_tiles.hpp).
// Included only by files compiled with -mavx512f.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace pf::cpu {

struct Avx512 {
  using reg = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kKeys = 8;                    // S^T registers: 8 keys x 2 vectors (measured best of 6-14)
  static constexpr int kValueColumns = 8;            // O^T registers: 8 columns x 2 vectors
  static constexpr int kScoreStepsPerIteration = 1;  // Q.K's loop runs one head-dim step an iteration

  static reg zero() { return _mm512_setzero_ps(); }
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, reg v) { _mm512_storeu_ps(p, v); }
  static reg set1(float x) { return _mm512_set1_ps(x); }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
  static reg max(reg a, reg b) { return _mm512_max_ps(a, b); }

  // Lanes whose query position (qpos[lane]) is before key_pos get the masked score.
  static reg mask_after(reg s, int32_t key_pos, const int32_t* qpos) {
    const __mmask16 future = _mm512_cmpgt_epi32_mask(_mm512_set1_epi32(key_pos), _mm512_loadu_si512(qpos));
    return _mm512_mask_blend_ps(future, s, _mm512_set1_ps(-1e30f));
  }

  // exp as cpu::exp_inplace computes it (2^k * degree-6 polynomial, 0 below -87); the 2^k
  // by scalef rather than building the exponent's bits.
  static reg exp(reg x) {
    const __mmask16 underflow = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_LT_OQ);
    // max/min return their second operand when one is NaN: x second, so NaN passes through.
    x = _mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_max_ps(_mm512_set1_ps(-87.0f), x));
    const reg k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    reg r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(1.428606765330187045e-06f), r);
    reg p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(static_cast<__mmask16>(~underflow), p, k);
  }
};

}  // namespace pf::cpu
