// The batch plan: the ordered list of micro-batches every rank executes. A micro-batch is
// one chunk of one prompt. World rank 0 builds it from the prompt lengths and the chunk
// policy and broadcasts it, so every rank walks the same schedule.
#pragma once

#include <cstdint>
#include <vector>

namespace pf::sched {

struct MicroBatch {
  int index = 0;      // position in the schedule
  int prompt = 0;     // input order index
  int64_t start = 0;  // first token of the chunk = prefix length already in the KV cache
  int length = 0;     // tokens in the chunk
  bool is_last = false;
};

struct BatchPlan {
  std::vector<int64_t> prompt_lengths;
  std::vector<MicroBatch> micro_batches;
  int max_chunk() const;
  int64_t total_tokens() const;  // tokens this plan computes (skipped prompts excluded)
  int num_prompts() const { return static_cast<int>(prompt_lengths.size()); }
  int scheduled_prompts() const;  // prompts with micro-batches in this plan
};

// A chunk policy decides the next chunk's size from the prefix already done.
class ChunkPolicy {
 public:
  virtual ~ChunkPolicy() = default;
  virtual int next_chunk(int64_t prefix_len, int64_t remaining) const = 0;
};

class FixedChunkPolicy final : public ChunkPolicy {
 public:
  explicit FixedChunkPolicy(int chunk_size) : chunk_size_(chunk_size) {}
  int next_chunk(int64_t, int64_t remaining) const override;

 private:
  int chunk_size_;
};

// Prompts in input order, each cut by the policy; prompts follow each other without a drain.
// Prompts with skip[p] != 0 (already done, on --resume) get no micro-batches. A prompt whose
// first cached[p] tokens are already in the KV cache (prefix reuse) is cut from there: its
// first chunk starts at cached[p], which must be below its length (its last token is computed).
BatchPlan make_plan(const std::vector<int64_t>& prompt_lengths, const ChunkPolicy& policy,
                    const std::vector<char>& skip = {}, const std::vector<int64_t>& cached = {});
// The chunks of a prompt from token `first` (0: the whole prompt) to its end.
std::vector<int> chunk_sizes(int64_t prompt_length, const ChunkPolicy& policy, int64_t first = 0);

std::vector<char> serialize(const BatchPlan& plan);
BatchPlan deserialize(const std::vector<char>& bytes);

}  // namespace pf::sched
