// Shared by the kernel tests (CPU, GPU, host simulator): seeded random inputs, bf16
// rounding on the host, and the relative 2-norm error that every comparison uses.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "io/safetensors.hpp"

namespace pf::test {

// Uniform in [-scale, scale), reproducible from the seed.
inline std::vector<float> random_vector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// The nearest bf16 value (round to nearest even), as a float.
inline float bf16_round(float f) { return io::bf16_to_float(io::float_to_bf16(f)); }
inline std::vector<float> rounded(std::vector<float> v) {
  for (auto& x : v) x = bf16_round(x);
  return v;
}

// ||got - want|| / ||want||; infinity if any element is NaN (unwritten or broken).
inline double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(got[i])) return std::numeric_limits<double>::infinity();
    diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += double(want[i]) * want[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

}  // namespace pf::test
