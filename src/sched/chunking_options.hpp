// How a run cuts prompts into chunks: the user's choices, gathered in one struct.
#pragma once

#include <string>

#include "sched/cost_model.hpp"
#include "sched/cost_source.hpp"

namespace pf::sched {

enum class ChunkPolicyKind {
  kFixed,    // every chunk C0
  kSglang,   // SGLang dynamic chunking: stage-0 fresh-prompt quadratic fit
  kPipefill  // prefix-aware fit on every stage, no tiny tail
};

// Defaults every command that chunks or pages shares (run, simulate, plan, profile).
constexpr int kDefaultChunkSize = 4096;
constexpr int kDefaultPageSize = 64;
// The longest chunk any command takes: 1.25 C0 (what dynamic chunking profiles) stays an int,
// and no prompt is longer.
constexpr int kMaxChunkTokens = 1 << 30;

struct ChunkingOptions {
  ChunkPolicyKind policy = ChunkPolicyKind::kFixed;
  int initial_chunk = kDefaultChunkSize;  // C0 (--chunk-size)
  double smooth_factor = 0.75;            // s
  int page_size = kDefaultPageSize;
  CostForm cost_form = CostForm::kFreshQuadratic;
  bool all_stages = false;  // profile every stage (else stage 0 only)
  bool fold_tail = false;
  int profile_points = 16;
  CostSource cost_source;  // --cost-model: reuse a saved profile instead of profiling
  int stages = 1;          // P, set from --pp (tail folding weighs the drain through P stages)

  bool dynamic() const { return policy != ChunkPolicyKind::kFixed; }
};

const char* policy_name(ChunkPolicyKind kind);
// What a policy profiles and fits unless told otherwise (--cost-form, --profile-stages):
// SGLang's, the fresh-prompt quadratic of stage 0; pipefill's, the prefix-aware fit of every stage.
CostForm default_cost_form(ChunkPolicyKind kind);
bool default_all_stages(ChunkPolicyKind kind);
// A policy with those two defaults (every other field at its own): what `profile` checks its
// fits against with sched::make_dynamic_policy, as `run` and `plan` use them.
ChunkingOptions policy_defaults(ChunkPolicyKind kind, int initial_chunk, int page_size);

}  // namespace pf::sched
