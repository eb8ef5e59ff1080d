// Batch plan construction and its wire format (flat int64 records).
#include "sched/batch_plan.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace pf::sched {

int BatchPlan::max_chunk() const {
  int longest = 0;
  for (const auto& mb : micro_batches) longest = std::max(longest, mb.length);
  return longest;
}

int64_t BatchPlan::total_tokens() const {
  int64_t total = 0;
  for (const auto& mb : micro_batches) total += mb.length;
  return total;
}

int BatchPlan::scheduled_prompts() const {
  int count = 0;
  for (const auto& mb : micro_batches) count += mb.is_last ? 1 : 0;
  return count;
}

int FixedChunkPolicy::next_chunk(int64_t, int64_t remaining) const {
  return static_cast<int>(std::min<int64_t>(chunk_size_, remaining));
}

std::vector<int> chunk_sizes(int64_t prompt_length, const ChunkPolicy& policy, int64_t first) {
  std::vector<int> sizes;
  for (int64_t done = first; done < prompt_length;) {
    const int size = policy.next_chunk(done, prompt_length - done);
    if (size <= 0 || size > prompt_length - done) throw std::logic_error("chunk policy returned an invalid size");
    sizes.push_back(size);
    done += size;
  }
  return sizes;
}

BatchPlan make_plan(const std::vector<int64_t>& prompt_lengths, const ChunkPolicy& policy,
                    const std::vector<char>& skip, const std::vector<int64_t>& cached) {
  BatchPlan plan;
  plan.prompt_lengths = prompt_lengths;
  for (int p = 0; p < static_cast<int>(prompt_lengths.size()); ++p) {
    if (p < static_cast<int>(skip.size()) && skip[p]) continue;
    int64_t start = p < static_cast<int>(cached.size()) ? cached[p] : 0;
    if (start < 0 || start >= prompt_lengths[p])
      throw std::logic_error("make_plan: a cached prefix must leave at least the prompt's last token to compute");
    const auto sizes = chunk_sizes(prompt_lengths[p], policy, start);
    for (size_t c = 0; c < sizes.size(); ++c) {
      plan.micro_batches.push_back(
          {static_cast<int>(plan.micro_batches.size()), p, start, sizes[c], c + 1 == sizes.size()});
      start += sizes[c];
    }
  }
  return plan;
}

std::vector<char> serialize(const BatchPlan& plan) {
  std::vector<int64_t> words;
  words.push_back(static_cast<int64_t>(plan.prompt_lengths.size()));
  words.insert(words.end(), plan.prompt_lengths.begin(), plan.prompt_lengths.end());
  words.push_back(static_cast<int64_t>(plan.micro_batches.size()));
  for (const auto& mb : plan.micro_batches) {
    words.insert(words.end(), {mb.prompt, mb.start, mb.length, mb.is_last ? 1 : 0});
  }
  std::vector<char> bytes(words.size() * sizeof(int64_t));
  std::memcpy(bytes.data(), words.data(), bytes.size());
  return bytes;
}

BatchPlan deserialize(const std::vector<char>& bytes) {
  std::vector<int64_t> words(bytes.size() / sizeof(int64_t));
  std::memcpy(words.data(), bytes.data(), words.size() * sizeof(int64_t));
  BatchPlan plan;
  size_t at = 0;
  const int64_t prompts = words.at(at++);
  for (int64_t i = 0; i < prompts; ++i) plan.prompt_lengths.push_back(words.at(at++));
  const int64_t count = words.at(at++);
  for (int64_t i = 0; i < count; ++i) {
    MicroBatch mb;
    mb.index = static_cast<int>(i);
    mb.prompt = static_cast<int>(words.at(at++));
    mb.start = words.at(at++);
    mb.length = static_cast<int>(words.at(at++));
    mb.is_last = words.at(at++) != 0;
    plan.micro_batches.push_back(mb);
  }
  return plan;
}

}  // namespace pf::sched
