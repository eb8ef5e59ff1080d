// Stage profiling (see stage_profiler.hpp).
#include "pipeline/stage_profiler.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

namespace pf::pipeline {
namespace {

constexpr int kProfilePrompt = -1;  // a prompt id no real prompt uses

std::vector<float> random_values(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(count);
  for (auto& x : v) x = u(rng);
  return v;
}

// Times one forward of `tokens` tokens after `prefix` tokens already in the pool.
double timed_forward(compute::CpuStageCompute& compute, const compute::AllReduce& all_reduce,
                     const GroupMax& group_max, int64_t prefix, int tokens, int hidden_size) {
  std::vector<float> hidden = random_values(static_cast<size_t>(tokens) * hidden_size, 7);
  const auto start = std::chrono::steady_clock::now();
  compute.forward({kProfilePrompt, prefix, tokens}, hidden.data(), all_reduce);
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

std::vector<sched::ChunkSample> profile_fresh_prompts(compute::CpuStageCompute& compute, kv::PagedKvPool& pool,
                                                      const compute::AllReduce& all_reduce, const GroupMax& group_max,
                                                      const ProfileGrid& grid, int hidden_size) {
  std::vector<sched::ChunkSample> samples;
  const auto lengths = fresh_prompt_lengths(grid);
  for (size_t i = 0; i < lengths.size(); ++i) {
    const double seconds = timed_forward(compute, all_reduce, group_max, 0, lengths[i], hidden_size);
    pool.release(kProfilePrompt);
    if (i > 0) samples.push_back({0, static_cast<double>(lengths[i]), seconds});  // first: warm-up
  }
  return samples;
}

std::vector<sched::ChunkSample> profile_prefixed_chunks(compute::CpuStageCompute& compute, kv::PagedKvPool& pool,
                                                        const compute::AllReduce& all_reduce,
                                                        const GroupMax& group_max, const ProfileGrid& grid,
                                                        int hidden_size) {
  const int c0 = grid.initial_chunk;
  const std::vector<int> sizes = {std::max(1, c0 / 4), std::max(1, c0 / 2), c0, c0 + c0 / 4};
  const int64_t max_prefix = std::max<int64_t>(0, grid.max_tokens - sizes.back());
  const int levels = std::max(3, (std::clamp(grid.points, 8, 128) + 3) / 4);
  const kv::KvShape& shape = pool.shape();
  const int kv_width = shape.kv_heads * shape.head_dim;

  // Warm-up forward, not recorded.
  timed_forward(compute, all_reduce, group_max, 0, sizes[0], hidden_size);
  pool.release(kProfilePrompt);

  std::vector<sched::ChunkSample> samples;
  for (int level = 0; level < levels; ++level) {
    const int64_t prefix = max_prefix * level / (levels - 1);
    for (int size : sizes) {
      const int tokens = static_cast<int>(std::min<int64_t>(size, grid.max_tokens - prefix));
      if (tokens <= 0) continue;
      // Fill the prefix's K/V with random values, block by block (their values do not matter).
      pool.reserve(kProfilePrompt, prefix + tokens);
      constexpr int kBlock = 4096;
      for (int64_t start = 0; start < prefix; start += kBlock) {
        const int count = static_cast<int>(std::min<int64_t>(kBlock, prefix - start));
        const auto kv = random_values(static_cast<size_t>(count) * kv_width, static_cast<uint32_t>(start));
        for (int layer = 0; layer < shape.layers; ++layer)
          pool.write(layer, kProfilePrompt, static_cast<int>(start), count, kv.data(), kv_width, kv.data(), kv_width);
      }
      const double seconds = timed_forward(compute, all_reduce, group_max, prefix, tokens, hidden_size);
      pool.release(kProfilePrompt);
      samples.push_back({static_cast<double>(prefix), static_cast<double>(tokens), seconds});
    }
  }
  return samples;
}

}  // namespace pf::pipeline
