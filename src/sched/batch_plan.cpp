// Batch plan construction and its wire format (flat int64 records).
#include "sched/batch_plan.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "errors.hpp"

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

BatchPlan BatchPlan::first_micro_batches(size_t count) const {
  BatchPlan cut = *this;
  if (count < cut.micro_batches.size()) cut.micro_batches.resize(count);
  return cut;
}

int BatchPlan::scheduled_prompts() const {
  int count = 0;
  for (const auto& mb : micro_batches) count += mb.is_last ? 1 : 0;
  return count;
}

int64_t BatchPlan::reused_tokens() const {
  int64_t total = 0;
  for (const auto& mb : micro_batches) total += mb.is_first && !restored(mb.prompt) ? mb.start : 0;
  return total;
}

int64_t BatchPlan::restored_tokens() const {
  int64_t total = 0;
  for (const auto& mb : micro_batches) total += mb.is_first && restored(mb.prompt) ? mb.start : 0;
  return total;
}

PrefixReuse store_offer(const std::vector<PrefixReuse>& outside, int p) {
  const bool offered = static_cast<size_t>(p) < outside.size() && outside[static_cast<size_t>(p)].tokens > 0 &&
                       outside[static_cast<size_t>(p)].store_entry >= 0;
  return offered ? outside[static_cast<size_t>(p)] : PrefixReuse{};
}

PrefixPlan PrefixPlan::from_outside(const std::vector<int64_t>& cached) {
  PrefixPlan prefixes;
  for (int64_t tokens : cached) prefixes.reuse.push_back({tokens, -1});
  return prefixes;
}

int FixedChunkPolicy::next_chunk(int64_t, int64_t remaining) const {
  return static_cast<int>(std::min<int64_t>(chunk_size_, remaining));
}

namespace {

std::string too_many_chunks(int64_t limit) {
  return "the chunk policy cuts the prompts into more than " + std::to_string(limit) +
         " chunks, the most a plan holds here: a larger --chunk-size (or, with dynamic chunking, a smaller "
         "--smooth-factor)";
}

}  // namespace

std::vector<int> chunk_sizes(int64_t prompt_length, const ChunkPolicy& policy, int64_t first, int64_t max_chunks) {
  std::vector<int> sizes;
  for (int64_t done = first; done < prompt_length;) {
    if (static_cast<int64_t>(sizes.size()) >= max_chunks) throw UserError(too_many_chunks(max_chunks));
    const int size = policy.next_chunk(done, prompt_length - done);
    if (size <= 0 || size > prompt_length - done) throw std::logic_error("chunk policy returned an invalid size");
    sizes.push_back(size);
    done += size;
  }
  return sizes;
}

BatchPlan make_plan(const std::vector<int64_t>& prompt_lengths, const ChunkPolicy& policy,
                    const std::vector<char>& skip, const PrefixPlan& prefixes, int64_t max_micro_batches) {
  const int n = static_cast<int>(prompt_lengths.size());
  BatchPlan plan;
  plan.prompt_lengths = prompt_lengths;
  plan.reuse.assign(static_cast<size_t>(n), PrefixReuse{});
  std::vector<int> order = prefixes.order;
  if (order.empty())
    for (int p = 0; p < n; ++p) order.push_back(p);
  std::vector<char> planned(static_cast<size_t>(n), 0);
  for (int p : order) {
    if (p < 0 || p >= n || planned[p]) throw std::logic_error("make_plan: the order is not a list of distinct prompts");
    planned[p] = 1;
    if (p < static_cast<int>(skip.size()) && skip[p]) continue;
    const PrefixReuse reuse = p < static_cast<int>(prefixes.reuse.size()) ? prefixes.reuse[p] : PrefixReuse{};
    if (reuse.tokens < 0 || reuse.tokens >= prompt_lengths[p])
      throw std::logic_error("make_plan: a cached prefix must leave at least the prompt's last token to compute");
    if ((reuse.source >= 0) + (reuse.store_entry >= 0) + reuse.restored > 1)
      throw std::logic_error("make_plan: a prefix comes from a prompt, the store or a checkpoint, not two of them");
    if (reuse.source >= 0 && (reuse.source >= n || !planned[reuse.source] ||
                              (reuse.source < static_cast<int>(skip.size()) && skip[reuse.source]) ||
                              reuse.tokens > prompt_lengths[reuse.source]))
      throw std::logic_error("make_plan: a prompt reuses the prefix of a prompt that does not run before it");
    plan.reuse[p] = reuse;
    int64_t start = reuse.tokens;
    const int64_t room = max_micro_batches - static_cast<int64_t>(plan.micro_batches.size());
    if (room <= 0) throw UserError(too_many_chunks(max_micro_batches));
    std::vector<int> sizes;
    try {
      sizes = chunk_sizes(prompt_lengths[p], policy, start, room);
    } catch (const UserError&) {  // the room, not the bound, ran out
      throw UserError(too_many_chunks(max_micro_batches));
    }
    for (size_t c = 0; c < sizes.size(); ++c) {
      plan.micro_batches.push_back(
          {static_cast<int>(plan.micro_batches.size()), p, start, sizes[c], c == 0, c + 1 == sizes.size()});
      start += sizes[c];
    }
  }
  return plan;
}

std::vector<char> serialize(const BatchPlan& plan) {
  std::vector<int64_t> words;
  words.push_back(static_cast<int64_t>(plan.prompt_lengths.size()));
  words.insert(words.end(), plan.prompt_lengths.begin(), plan.prompt_lengths.end());
  for (size_t p = 0; p < plan.prompt_lengths.size(); ++p) {
    const PrefixReuse reuse = p < plan.reuse.size() ? plan.reuse[p] : PrefixReuse{};
    words.insert(words.end(), {reuse.tokens, reuse.source, reuse.store_entry, reuse.restored ? 1 : 0});
  }
  words.push_back(static_cast<int64_t>(plan.micro_batches.size()));
  for (const auto& mb : plan.micro_batches) {
    words.insert(words.end(), {mb.prompt, mb.start, mb.length, (mb.is_first ? 1 : 0) | (mb.is_last ? 2 : 0)});
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
  for (int64_t i = 0; i < prompts; ++i) {
    const int64_t tokens = words.at(at++);
    const int source = static_cast<int>(words.at(at++));
    const int store_entry = static_cast<int>(words.at(at++));
    plan.reuse.push_back({tokens, source, store_entry, words.at(at++) != 0});
  }
  const int64_t count = words.at(at++);
  for (int64_t i = 0; i < count; ++i) {
    MicroBatch mb;
    mb.index = static_cast<int>(i);
    mb.prompt = static_cast<int>(words.at(at++));
    mb.start = words.at(at++);
    mb.length = static_cast<int>(words.at(at++));
    const int64_t flags = words.at(at++);
    mb.is_first = (flags & 1) != 0;
    mb.is_last = (flags & 2) != 0;
    plan.micro_batches.push_back(mb);
  }
  return plan;
}

}  // namespace pf::sched
