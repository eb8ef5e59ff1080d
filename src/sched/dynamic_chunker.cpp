// Dynamic chunk sizing (see dynamic_chunker.hpp for the rules and their order).
#include "sched/dynamic_chunker.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace pf::sched {

DynamicChunkPolicy::DynamicChunkPolicy(const DynamicChunkConfig& config, std::vector<ChunkCostModel> stage_models)
    : config_(config), models_(std::move(stage_models)) {
  if (models_.empty()) throw std::logic_error("dynamic chunking needs at least one cost model");
  for (const auto& m : models_) beat_ = std::max(beat_, m.target_time(config_.initial_chunk));
}

int chunk_alignment(int page_size) {
  return std::max(page_size, 64);
}

int chunk_floor(int initial_chunk) {
  return initial_chunk / 4;
}

int longest_chunk(int initial_chunk, int page_size) {
  return initial_chunk + chunk_floor(initial_chunk) + chunk_alignment(page_size);
}

int shortest_chunk(const ChunkingOptions& options) {
  return options.dynamic() ? std::max(1, chunk_floor(options.initial_chunk)) : options.initial_chunk;
}

int DynamicChunkPolicy::alignment() const {
  return chunk_alignment(config_.page_size);
}

int DynamicChunkPolicy::cap_and_fold(int64_t size, int64_t remaining, int64_t prefix) const {
  size = std::min<int64_t>(size, remaining);
  const int64_t tail = remaining - size;
  if (!config_.fold_tail || tail <= 0 || tail >= floor_tokens()) return static_cast<int>(size);
  const double L = static_cast<double>(prefix), x = static_cast<double>(size), r = static_cast<double>(tail);
  for (const auto& m : models_) {
    const double extra_on_critical_path = config_.stages * (m.chunk_time(L, x + r) - m.chunk_time(L, x));
    if (!(extra_on_critical_path < m.chunk_time(L + x, r))) return static_cast<int>(size);  // keep the tail
  }
  return static_cast<int>(remaining);
}

int DynamicChunkPolicy::next_chunk(int64_t prefix_len, int64_t remaining) const {
  const int c0 = config_.initial_chunk;
  if (prefix_len == 0) return cap_and_fold(c0, remaining, 0);  // the first chunk of every prompt is C0
  // The slowest stage sets the beat: every stage must finish its x tokens within it.
  double solved = INFINITY;
  for (const auto& model : models_) {
    const auto x = model.solve(static_cast<double>(prefix_len), beat_);
    if (!x) return cap_and_fold(c0, remaining, prefix_len);  // no real positive root: fall back to C0
    solved = std::min(solved, *x);
  }
  double x = c0 + config_.smooth_factor * (solved - c0);
  x = std::max(x, static_cast<double>(floor_tokens()));
  const int align = alignment();
  int64_t size = static_cast<int64_t>(std::floor(x / align)) * align;
  if (size < align) size = align;
  return cap_and_fold(size, remaining, prefix_len);
}

std::unique_ptr<ChunkPolicy> make_dynamic_policy(const ChunkingOptions& o, const std::vector<StageCostFit>& fits,
                                                 std::string& problem) {
  std::vector<ChunkCostModel> models;
  problem.clear();
  for (const auto& fit : fits) {
    if (!o.all_stages && fit.stage != 0) continue;
    const FitResult& chosen = fit.fit(o.cost_form);
    if (!chosen.ok) {  // name every failing stage, not just the first
      problem += (problem.empty() ? "" : "; ") + ("stage " + std::to_string(fit.stage) + ": " + chosen.problem);
      continue;
    }
    models.push_back(chosen.model);
  }
  if (!problem.empty()) return nullptr;
  if (models.empty()) {
    problem = "no stage was profiled";
    return nullptr;
  }
  return std::make_unique<DynamicChunkPolicy>(
      DynamicChunkConfig{o.initial_chunk, o.smooth_factor, o.page_size, o.fold_tail, o.stages}, std::move(models));
}

}  // namespace pf::sched
