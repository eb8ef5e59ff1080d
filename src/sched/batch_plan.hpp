// The batch plan: the ordered list of micro-batches every rank executes. A micro-batch is
// one chunk of one prompt. World rank 0 builds it from the prompt lengths and the chunk
// policy and broadcasts it, so every rank walks the same schedule.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace pf::sched {

struct MicroBatch {
  int index = 0;          // position in the schedule
  int prompt = 0;         // input order index
  int64_t start = 0;      // first token of the chunk = prefix length already in the KV cache
  int length = 0;         // tokens in the chunk
  bool is_first = false;  // the prompt's first chunk (start is its reused prefix, usually 0)
  bool is_last = false;
};

// Where a prompt's first `tokens` tokens come from without being computed: the KV pages of
// `source`, an earlier prompt of the plan with the same first tokens (prefix reuse), or,
// with source -1, a cache outside the batch: entry `store_entry` of the run's --kv-store
// (kvcache/kv_store.hpp), or, `restored`, the checkpoint of an interrupted run of this output
// (pipeline/checkpoint_run.hpp), or nothing to load (simulate --cached-tokens). tokens 0: none.
struct PrefixReuse {
  int64_t tokens = 0;
  int source = -1;
  int store_entry = -1;
  bool restored = false;
};

// What prefix reuse decided (sched/prefix_sharing.hpp): the order prompts run in (empty:
// input order) and each prompt's reused prefix (empty: none).
struct PrefixPlan {
  std::vector<int> order;
  std::vector<PrefixReuse> reuse;
  // cached[p] tokens of each prompt already in a cache outside the batch, in input order.
  static PrefixPlan from_outside(const std::vector<int64_t>& cached);
};

// Prompt p's offer from the KV store in `outside` (per prompt), or none: what a prompt loads
// when the batch's longer reuse it was passed over for is dropped.
PrefixReuse store_offer(const std::vector<PrefixReuse>& outside, int p);

struct BatchPlan {
  std::vector<int64_t> prompt_lengths;
  std::vector<PrefixReuse> reuse;  // per prompt (all zero without prefix reuse)
  std::vector<MicroBatch> micro_batches;
  int max_chunk() const;
  int64_t total_tokens() const;  // tokens this plan computes (skipped prompts excluded)
  int num_prompts() const { return static_cast<int>(prompt_lengths.size()); }
  // The plan's first `count` micro-batches: what a run stopped there computed.
  BatchPlan first_micro_batches(size_t count) const;
  int scheduled_prompts() const;    // prompts with micro-batches in this plan
  int64_t reused_tokens() const;    // tokens of scheduled prompts taken from a cache, not computed
  int64_t restored_tokens() const;  // tokens of scheduled prompts restored from a checkpoint
  bool restored(int prompt) const { return prompt < static_cast<int>(reuse.size()) && reuse[prompt].restored; }
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

constexpr int64_t kUnboundedPlan = std::numeric_limits<int64_t>::max();
// What the study commands (plan, simulate) hold in memory, tens to hundreds of bytes each:
// micro-batches times the stages they pass through.
constexpr int64_t kStudyStageChunks = 10'000'000;

// Prompts in `prefixes.order` (default: input order), each cut by the policy; prompts follow
// each other without a drain. Prompts with skip[p] != 0 (already done, on --resume) get no
// micro-batches. A prompt whose first prefixes.reuse[p].tokens tokens are already in the KV
// cache is cut from there: its first chunk starts at that length, which must be below its
// length (its last token is computed), and its source must run before it.
// More than `max_micro_batches` (the study commands' bound on memory and time: a dynamic
// policy can cut far finer than its initial chunk) is a UserError.
BatchPlan make_plan(const std::vector<int64_t>& prompt_lengths, const ChunkPolicy& policy,
                    const std::vector<char>& skip = {}, const PrefixPlan& prefixes = {},
                    int64_t max_micro_batches = kUnboundedPlan);
// The chunks of a prompt from token `first` (0: the whole prompt) to its end, at most
// `max_chunks` of them (UserError beyond).
std::vector<int> chunk_sizes(int64_t prompt_length, const ChunkPolicy& policy, int64_t first = 0,
                             int64_t max_chunks = kUnboundedPlan);

std::vector<char> serialize(const BatchPlan& plan);
BatchPlan deserialize(const std::vector<char>& bytes);

}  // namespace pf::sched
