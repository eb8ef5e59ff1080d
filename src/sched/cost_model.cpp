// Cost-model fits and the quadratic solve.
#include "sched/cost_model.hpp"

#include <cmath>
#include <cstdio>

#include "errors.hpp"
#include "sched/chunking_options.hpp"

namespace pf::sched {

const char* policy_name(ChunkPolicyKind kind) {
  switch (kind) {
    case ChunkPolicyKind::kFixed:
      return "fixed";
    case ChunkPolicyKind::kSglang:
      return "sglang";
    case ChunkPolicyKind::kPipefill:
      return "pipefill";
  }
  return "?";
}

CostForm default_cost_form(ChunkPolicyKind kind) {
  return kind == ChunkPolicyKind::kPipefill ? CostForm::kPrefixAware : CostForm::kFreshQuadratic;
}

bool default_all_stages(ChunkPolicyKind kind) {
  return kind == ChunkPolicyKind::kPipefill;
}

ChunkingOptions policy_defaults(ChunkPolicyKind kind, int initial_chunk, int page_size) {
  ChunkingOptions options;
  options.policy = kind;
  options.initial_chunk = initial_chunk;
  options.page_size = page_size;
  options.cost_form = default_cost_form(kind);
  options.all_stages = default_all_stages(kind);
  return options;
}

const char* cost_form_name(CostForm form) {
  return form == CostForm::kFreshQuadratic ? "sglang" : "prefix";
}

CostForm parse_cost_form(const std::string& name) {
  if (name == "sglang") return CostForm::kFreshQuadratic;
  if (name == "prefix") return CostForm::kPrefixAware;
  throw UserError("unknown cost model form \"" + name + "\" (sglang or prefix)");
}

std::optional<double> ChunkCostModel::solve(double prefix, double target) const {
  const double linear = 2.0 * a * prefix + b;
  const double constant = c + gamma * prefix - target;
  if (a <= 0) {  // degenerate: linear model
    if (linear <= 0) return std::nullopt;
    const double x = -constant / linear;
    return x > 0 && std::isfinite(x) ? std::optional<double>(x) : std::nullopt;
  }
  const double discriminant = linear * linear - 4.0 * a * constant;
  if (!(discriminant >= 0)) return std::nullopt;
  const double x = (-linear + std::sqrt(discriminant)) / (2.0 * a);
  return x > 0 && std::isfinite(x) ? std::optional<double>(x) : std::nullopt;
}

std::optional<std::vector<double>> least_squares(const std::vector<double>& a_in, int rows, int cols,
                                                 const std::vector<double>& y_in) {
  if (rows < cols) return std::nullopt;
  std::vector<double> a = a_in, y = y_in, scale(cols, 0.0);
  for (int j = 0; j < cols; ++j) {
    for (int i = 0; i < rows; ++i) scale[j] += a[i * cols + j] * a[i * cols + j];
    scale[j] = std::sqrt(scale[j]);
    if (scale[j] == 0) return std::nullopt;
    for (int i = 0; i < rows; ++i) a[i * cols + j] /= scale[j];
  }
  for (int k = 0; k < cols; ++k) {  // Householder reflection zeroing column k below the diagonal
    double norm = 0;
    for (int i = k; i < rows; ++i) norm += a[i * cols + k] * a[i * cols + k];
    norm = std::sqrt(norm);
    if (norm < 1e-12) return std::nullopt;  // rank deficient
    const double alpha = a[k * cols + k] > 0 ? -norm : norm;
    std::vector<double> v(rows, 0.0);
    for (int i = k; i < rows; ++i) v[i] = a[i * cols + k];
    v[k] -= alpha;
    double vv = 0;
    for (int i = k; i < rows; ++i) vv += v[i] * v[i];
    for (int j = k; j < cols; ++j) {
      double dot = 0;
      for (int i = k; i < rows; ++i) dot += v[i] * a[i * cols + j];
      for (int i = k; i < rows; ++i) a[i * cols + j] -= 2 * dot / vv * v[i];
    }
    double dot = 0;
    for (int i = k; i < rows; ++i) dot += v[i] * y[i];
    for (int i = k; i < rows; ++i) y[i] -= 2 * dot / vv * v[i];
  }
  std::vector<double> w(cols);
  for (int k = cols - 1; k >= 0; --k) {  // back substitution on R
    double sum = y[k];
    for (int j = k + 1; j < cols; ++j) sum -= a[k * cols + j] * w[j];
    w[k] = sum / a[k * cols + k];
  }
  for (int j = 0; j < cols; ++j) w[j] /= scale[j];
  return w;
}

namespace {

constexpr int kMinPoints = 8;

// Least squares of the samples' seconds on the design row `row(sample)` of `cols` columns.
// Sets `problem` and returns nullopt with fewer than kMinPoints samples or a singular design.
template <typename Row>
std::optional<std::vector<double>> fit_columns(const std::vector<ChunkSample>& samples, int cols, Row row,
                                               std::string& problem) {
  if (static_cast<int>(samples.size()) < kMinPoints) {
    problem = "only " + std::to_string(samples.size()) + " profile points (need 8)";
    return std::nullopt;
  }
  std::vector<double> design, seconds;
  for (const auto& s : samples) {
    const std::vector<double> r = row(s);
    design.insert(design.end(), r.begin(), r.end());
    seconds.push_back(s.seconds);
  }
  auto w = least_squares(design, static_cast<int>(samples.size()), cols, seconds);
  if (!w) problem = "the profile points do not determine the model (all of the same size?)";
  return w;
}

// a must be positive: attention makes every chunk dearer as the prefix grows.
bool check_quadratic(FitResult& result, double raw_a) {
  if (raw_a > 0) return result.ok = true;
  char text[96];
  std::snprintf(text, sizeof text, "fitted quadratic coefficient a = %.3g is not positive", raw_a);
  result.problem = text;
  return false;
}

}  // namespace

FitResult fit_fresh_quadratic(const std::vector<ChunkSample>& samples) {
  FitResult result;
  result.model.form = CostForm::kFreshQuadratic;
  const auto w = fit_columns(
      samples, 3,
      [](const ChunkSample& s) {
        const double n = s.prefix + s.tokens;  // a fresh prompt: prefix is 0
        return std::vector<double>{n * n, n, 1.0};
      },
      result.problem);
  if (!w) return result;
  result.model.a = (*w)[0];
  result.model.b = std::max(0.0, (*w)[1]);
  check_quadratic(result, (*w)[0]);
  return result;
}

FitResult fit_prefix_aware(const std::vector<ChunkSample>& samples) {
  FitResult result;
  result.model.form = CostForm::kPrefixAware;
  const auto w = fit_columns(
      samples, 4,
      [](const ChunkSample& s) {
        return std::vector<double>{2.0 * s.prefix * s.tokens + s.tokens * s.tokens, s.tokens, s.prefix, 1.0};
      },
      result.problem);
  if (!w) return result;
  result.model.a = (*w)[0];
  result.model.b = std::max(0.0, (*w)[1]);
  result.model.gamma = std::max(0.0, (*w)[2]);
  result.model.c = std::max(0.0, (*w)[3]);
  check_quadratic(result, (*w)[0]);
  return result;
}

double mean_relative_error(const ChunkCostModel& model, const std::vector<ChunkSample>& samples) {
  if (samples.empty()) return 0;
  double total = 0;
  for (const auto& s : samples) total += std::fabs(model.chunk_time(s.prefix, s.tokens) - s.seconds) / s.seconds;
  return total / static_cast<double>(samples.size());
}

}  // namespace pf::sched
