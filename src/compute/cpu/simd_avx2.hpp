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

  // e^x for the online softmax's x = score - running max <= 0 (NaN passes through): 2^k e^r, r =
  // x - k ln 2 in [-ln 2 / 2, ln 2 / 2], e^r by a degree-6 polynomial 1 + r q(r), q fitted for the
  // least largest relative error: 8.1e-8 in float32 with FMA, RMS 2.7e-8 and mean 1e-9 (float32's
  // own rounding: 5.9e-8, 2.5e-8), where the degree-6 Taylor series had 2.3e-7, 4.2e-8 and 4e-9. A
  // degree-5 fit (1.6e-7 at most) had RMS 6.6e-8 and a bias of -1.8e-8: attention outputs 30 % further
  // from float64, and lm-eval's log-likelihoods past their 1e-4. The constant term is 1 exactly,
  // so e^0 = 1: the rescaling factor of a row whose maximum did not move (1 + 1 ulp there
  // drifted a bit per key block). x is clamped at -87, where e^x is 1.6e-38, still normal: a
  // masked score (-1e30) gives that instead of 0, beside the row's largest term of 1 an addend
  // float32 cannot see. 13 instructions where a general exp takes 17 (no upper clamp, no
  // underflow mask; k rounded by the shifter below, not round + convert): the softmax is ~14 %
  // of the AVX2 kernel.
  static reg exp(reg x) {
    x = _mm256_max_ps(_mm256_set1_ps(-87.0f), x);  // x second: NaN passes through
    // 1.5 * 2^23 + 127: x log2(e) plus it rounds to an integer in the low mantissa bits, which
    // hold k + 127, the exponent field of 2^k (k in [-126, 0]).
    const reg shifter = _mm256_set1_ps(12582912.0f + 127.0f);
    const reg shifted = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), shifter);
    const reg k = _mm256_sub_ps(shifted, shifter);
    reg r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693145751953125f), x);  // ln 2 in two parts (Cody-Waite)
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(1.428606765330187045e-06f), r);
    reg p = _mm256_set1_ps(0.0013843648f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.008374154f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.041668f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.16666432f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.49999994f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i two_k = _mm256_slli_epi32(_mm256_castps_si256(shifted), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(two_k));
  }
};

}  // namespace pf::cpu
