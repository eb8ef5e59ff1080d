// Stage profiling (see stage_profiler.hpp).
#include "pipeline/stage_profiler.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

namespace pf::pipeline {
namespace {

constexpr int kProfilePrompt = -1;  // a prompt id no real prompt uses

// Times one forward of `tokens` tokens after `prefix` tokens already in the stage.
double timed_forward(compute::StageCompute& compute, const GroupMax& group_max, int64_t prefix, int tokens,
                     int hidden_size) {
  const compute::ChunkContext chunk{kProfilePrompt, prefix, tokens};
  if (auto modelled = compute.modelled_seconds(chunk)) return *modelled;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> hidden(static_cast<size_t>(tokens) * hidden_size);
  for (auto& v : hidden) v = uniform(rng);
  float* input = compute.profiling_hidden(hidden);
  compute.synchronize();
  const auto start = std::chrono::steady_clock::now();
  compute.forward(chunk, input);
  compute.synchronize();  // asynchronous backends: time the work, not its enqueueing
  const double local = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return group_max(local);
}

}  // namespace

std::vector<int> fresh_prompt_lengths(const ProfileGrid& grid) {
  const int points = std::clamp(grid.points, 2, 128);
  const double longest = std::min<double>(1.25 * grid.initial_chunk, static_cast<double>(grid.max_tokens));
  const double shortest = std::max(1.0, grid.initial_chunk / 100.0);
  std::vector<int> lengths;
  for (int i = 0; i < points; ++i)
    lengths.push_back(std::max(1, static_cast<int>(std::lround(longest - i * (longest - shortest) / (points - 1)))));
  return lengths;
}

std::vector<sched::ChunkSample> profile_fresh_prompts(compute::StageCompute& compute, const GroupMax& group_max,
                                                      const ProfileGrid& grid, int hidden_size) {
  std::vector<sched::ChunkSample> samples;
  const auto lengths = fresh_prompt_lengths(grid);
  for (size_t i = 0; i < lengths.size(); ++i) {
    const double seconds = timed_forward(compute, group_max, 0, lengths[i], hidden_size);
    compute.finish_prompt(kProfilePrompt);
    if (i > 0) samples.push_back({0, static_cast<double>(lengths[i]), seconds});  // first: warm-up
    if (grid.progress) grid.progress("fresh prompts", static_cast<int>(i + 1), static_cast<int>(lengths.size()));
  }
  return samples;
}

std::vector<sched::ChunkSample> profile_prefixed_chunks(compute::StageCompute& compute, const GroupMax& group_max,
                                                        const ProfileGrid& grid, int hidden_size) {
  const int c0 = grid.initial_chunk;
  const std::vector<int> sizes = {std::max(1, c0 / 4), std::max(1, c0 / 2), c0, c0 + c0 / 4};
  const int64_t max_prefix = std::max<int64_t>(0, grid.max_tokens - sizes.back());
  const int levels = std::max(3, (std::clamp(grid.points, 8, 128) + 3) / 4);

  timed_forward(compute, group_max, 0, sizes[0], hidden_size);  // warm-up, not recorded
  compute.finish_prompt(kProfilePrompt);

  std::vector<sched::ChunkSample> samples;
  const int total = levels * static_cast<int>(sizes.size());
  for (int level = 0; level < levels; ++level) {
    const int64_t prefix = max_prefix * level / (levels - 1);
    for (size_t k = 0; k < sizes.size(); ++k) {
      const int tokens = static_cast<int>(std::min<int64_t>(sizes[k], grid.max_tokens - prefix));
      if (tokens > 0) {
        compute.prepare_prefix(kProfilePrompt, prefix, tokens);
        const double seconds = timed_forward(compute, group_max, prefix, tokens, hidden_size);
        compute.finish_prompt(kProfilePrompt);
        samples.push_back({static_cast<double>(prefix), static_cast<double>(tokens), seconds});
      }
      if (grid.progress)
        grid.progress("chunks after prefixes", level * static_cast<int>(sizes.size()) + static_cast<int>(k) + 1, total);
    }
  }
  return samples;
}

sched::StageCostFit profile_and_fit(int stage, compute::StageCompute& compute, const GroupMax& group_max,
                                    const ProfileGrid& grid, int hidden_size, bool fresh, bool prefixed) {
  std::vector<sched::ChunkSample> fresh_samples, prefixed_samples;
  if (fresh) fresh_samples = profile_fresh_prompts(compute, group_max, grid, hidden_size);
  if (prefixed) prefixed_samples = profile_prefixed_chunks(compute, group_max, grid, hidden_size);
  return sched::fit_stage(stage, fresh_samples, prefixed_samples);
}

int64_t profile_capacity_tokens(const std::vector<int64_t>& prompt_lengths, int initial_chunk) {
  int64_t longest = 0;
  for (int64_t length : prompt_lengths) longest = std::max(longest, length);
  return longest + 2ll * initial_chunk;
}

}  // namespace pf::pipeline
