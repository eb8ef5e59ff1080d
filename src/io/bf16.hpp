// bfloat16 in host memory (the cpu backend's `--dtype bf16`, its KV pool, the exports): the upper half of a float32,
// rounded to nearest even (NaN stays NaN). Widening is exact, so a GEMM of widened bf16
// values in float32 has the products of a bf16 x bf16 -> float32 GEMM exactly (8-bit
// significands multiply exactly in float32's 24): only the summation order differs.
// Loops over plain integers, so that the compiler vectorizes them.
#pragma once

#include <cstdint>
#include <cstring>

namespace pf::bf16 {

inline uint16_t from_float(float value) {
  uint32_t word;
  std::memcpy(&word, &value, 4);
  const bool nan = (word & 0x7FFFFFFFu) > 0x7F800000u;
  const uint32_t rounded = (word + 0x7FFFu + ((word >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>(nan ? (word >> 16) | 0x40u : rounded);
}

inline float to_float(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &word, 4);
  return value;
}

// The nearest bf16 value, as a float.
inline float round(float value) {
  return to_float(from_float(value));
}

inline void round_all(float* values, int64_t n) {
  for (int64_t i = 0; i < n; ++i) values[i] = round(values[i]);
}

inline void widen(const uint16_t* in, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = to_float(in[i]);
}

inline void narrow(const float* in, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = from_float(in[i]);
}

}  // namespace pf::bf16
