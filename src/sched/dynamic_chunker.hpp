// Dynamic chunking: size every chunk so it takes the same wall-clock time as the first
// (C0 tokens at prefix 0), although attention makes later chunks dearer per token.
//
// SGLang semantics, in this order: first chunk C0; at prefix L solve t(L, x) = T (see
// cost_model.hpp); smooth x = C0 + s (x* - C0); floor at C0/4; align down to
// max(page_size, 64) (raised to the alignment if below it); cap at the tokens left; C0
// when the solve fails. pipefill additions: several stage models (the slowest stage sets the
// beat: x is the smallest of the per-stage solutions) and, optionally, no tiny tail: if what
// would remain after a chunk is below the floor, it is folded into that chunk when the model
// says that is faster. The last chunk crosses all P stages on the critical path, so folding
// a tail of r tokens into a chunk of x costs P (t(L, x + r) - t(L, x)) and saves the tail's
// own trip, t(L + x, r): worth it when per-chunk overheads (the c term) dominate, not when
// the tail is nearly free.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sched/batch_plan.hpp"
#include "sched/chunking_options.hpp"
#include "sched/cost_model.hpp"
#include "sched/cost_profile.hpp"

namespace pf::sched {

// Dynamic chunks are multiples of max(page_size, 64), raised to it when smaller.
int chunk_alignment(int page_size);
// C0/4: no dynamic chunk is cut below it, and a tail below it may be folded into the chunk before.
int chunk_floor(int initial_chunk);
// A bound on the longest chunk a plan for C0 and this page size can hold (a profile's longest,
// 1.25 C0, included), for the workspace a backend reserves before it sizes its KV pool: the
// first chunk C0 (no later one is longer) or the alignment a dynamic chunk is raised to, plus
// a folded tail.
int longest_chunk(int initial_chunk, int page_size);
// The shortest chunk a plan of these options cuts before a prompt's last: C0 for fixed
// chunks, the floor C0 / 4 for a dynamic policy (what a CP rank's share of a prompt is
// bounded by: sched/context_split.hpp).
int shortest_chunk(const ChunkingOptions& options);

struct DynamicChunkConfig {
  int initial_chunk = kDefaultChunkSize;  // C0
  double smooth_factor = 0.75;
  int page_size = kDefaultPageSize;
  bool fold_tail = false;
  int stages = 1;  // P: how many stages the last chunk crosses (for the fold decision)
};

class DynamicChunkPolicy final : public ChunkPolicy {
 public:
  // `stage_models`: one model per profiled stage (at least one).
  DynamicChunkPolicy(const DynamicChunkConfig& config, std::vector<ChunkCostModel> stage_models);
  int next_chunk(int64_t prefix_len, int64_t remaining) const override;

  int floor_tokens() const { return chunk_floor(config_.initial_chunk); }
  int alignment() const;

 private:
  int cap_and_fold(int64_t size, int64_t remaining, int64_t prefix) const;
  DynamicChunkConfig config_;
  std::vector<ChunkCostModel> models_;
  double beat_ = 0;  // T: the slowest stage's time for C0 tokens at prefix 0
};

// The dynamic policy for `options` from the stages' fits (stage 0 only, or every stage,
// in the chosen cost form); nullptr with `problem` set when a needed fit failed.
std::unique_ptr<ChunkPolicy> make_dynamic_policy(const ChunkingOptions& options, const std::vector<StageCostFit>& fits,
                                                 std::string& problem);

}  // namespace pf::sched
