// RoPE frequencies and scale from config.json (see rope_frequencies.hpp).
#include "model/rope_frequencies.hpp"

#include <algorithm>
#include <cmath>

namespace pf::model {

namespace {

// transformers' _compute_yarn_parameters: each frequency blends the original
// (extrapolated) and the factor-divided (interpolated) one by a linear ramp over the
// dimensions between beta_fast and beta_slow rotations of the original context.
void apply_yarn(const RopeScaling& s, double theta, int dim, std::vector<double>& inv_freq) {
  auto correction_dim = [&](double rotations) {
    return dim * std::log(s.original_max_position_embeddings / (rotations * 2.0 * M_PI)) / (2.0 * std::log(theta));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1.0);
  if (low == high) high += 0.001;  // as transformers: no division by zero
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation = 1.0 - ramp;
    inv_freq[i] = inv_freq[i] / s.factor * (1.0 - extrapolation) + inv_freq[i] * extrapolation;
  }
}

}  // namespace

std::vector<double> rope_inv_freq(const ModelConfig& c) {
  const int dim = c.rope_dim(), half = dim / 2;
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i) inv_freq[i] = 1.0 / std::pow(c.rope_theta, (2.0 * i) / dim);
  if (c.rope_scaling.yarn) apply_yarn(c.rope_scaling, c.rope_theta, dim, inv_freq);
  if (!c.rope_scaling.llama3) return inv_freq;
  const auto& s = c.rope_scaling;
  const double low_freq_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
  const double high_freq_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
  for (double& f : inv_freq) {
    const double wavelen = 2.0 * M_PI / f;
    if (wavelen < high_freq_wavelen) continue;  // high frequencies: kept
    if (wavelen > low_freq_wavelen) {           // low frequencies: stretched by `factor`
      f /= s.factor;
      continue;
    }
    const double smooth =
        (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    f = (1.0 - smooth) * f / s.factor + smooth * f;
  }
  return inv_freq;
}

float rope_scale(const ModelConfig& c) {
  return c.rope_scaling.yarn ? static_cast<float>(c.rope_scaling.attention_factor) : 1.0f;
}

}  // namespace pf::model
