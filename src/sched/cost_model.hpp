// Cost models of one chunk's compute time, their least-squares fits, and the solve that
// dynamic chunking uses. Two forms, one formula:
//
//   t(L, x) = c + gamma * L + b * x + a * (2 L x + x^2)       chunk of x tokens after L
//
// - kFreshQuadratic (SGLang): fit f(n) = a n^2 + b n + c to fresh prompts of n tokens and
//   assume chunk time = f(L + x) - f(L) = a (2Lx + x^2) + b x, i.e. c and gamma play no
//   part in the chunk time (stored as 0) and the target is T = a C0^2 + b C0.
// - kPrefixAware (pipefill): fit all four coefficients to chunks timed after real prefixes;
//   the target is T = t(0, C0).
// Either way the next size solves t(L, x) = T:  a x^2 + (2aL + b) x + (c + gamma L - T) = 0.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace pf::sched {

enum class CostForm { kFreshQuadratic, kPrefixAware };
const char* cost_form_name(CostForm form);
CostForm parse_cost_form(const std::string& name);  // "sglang" | "prefix"; UserError otherwise

struct ChunkCostModel {
  CostForm form = CostForm::kFreshQuadratic;
  double a = 0, b = 0, c = 0, gamma = 0;

  double chunk_time(double prefix, double tokens) const {
    return c + gamma * prefix + b * tokens + a * (2.0 * prefix * tokens + tokens * tokens);
  }
  double target_time(int initial_chunk) const { return chunk_time(0, initial_chunk); }
  // The x > 0 with chunk_time(prefix, x) = target, or nullopt (no real positive root).
  std::optional<double> solve(double prefix, double target) const;
};

// One timed forward: `tokens` tokens after a prefix of `prefix` tokens took `seconds`.
struct ChunkSample {
  double prefix = 0;
  double tokens = 0;
  double seconds = 0;
};

struct FitResult {
  ChunkCostModel model;
  bool ok = false;
  std::string problem;  // why not ok: too few points, a <= 0, singular
};

// SGLang: least squares of seconds on [n^2, n, 1] over fresh prompts (prefix must be 0),
// at least 8 points; a <= 0 fails; b < 0 is clamped to 0.
FitResult fit_fresh_quadratic(const std::vector<ChunkSample>& samples);
// pipefill: least squares of seconds on [2Lx + x^2, x, L, 1], at least 8 points; a <= 0
// fails; negative b, gamma or c are clamped to 0.
FitResult fit_prefix_aware(const std::vector<ChunkSample>& samples);

// Mean of |predicted - measured| / measured over the samples (a model's held-out error).
double mean_relative_error(const ChunkCostModel& model, const std::vector<ChunkSample>& samples);

// Least squares by Householder QR: argmin |A w - y|, A is rows x cols, row-major. Columns
// are scaled to unit norm first (n^2 and 1 differ by 10 orders of magnitude).
std::optional<std::vector<double>> least_squares(const std::vector<double>& a, int rows, int cols,
                                                 const std::vector<double>& y);

}  // namespace pf::sched
