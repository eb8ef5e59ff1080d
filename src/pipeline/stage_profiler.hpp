// Profiling a stage's compute for dynamic chunking: timed forwards of this stage's own
// layers on synthetic hidden states, collective over the stage's TP group (the all-reduces
// are part of the cost). Two sample sets:
//  - fresh prompts (SGLang): n tokens at prefix 0, n evenly spaced from 1.25 C0 down to
//    about C0/100, the first forward dropped as warm-up;
//  - prefixed chunks (pipefill): x tokens after a prefix of L whose K/V is filled with random
//    values (attention's cost does not depend on them), over a grid of L and x.
// A backend whose cost is a model (emulate) is read, not timed: a timed sleep would add
// only scheduler noise to the same number.
#pragma once

#include <functional>
#include <vector>

#include "compute/stage_compute.hpp"
#include "sched/cost_model.hpp"
#include "sched/cost_profile.hpp"

namespace pf::pipeline {

struct ProfileGrid {
  int initial_chunk = 4096;  // C0
  int points = 16;           // forwards per sample set (at most 128)
  int64_t max_tokens = 0;    // prefix + chunk must fit the stage (StageCompute::capacity_tokens)
  // Called after each timed forward of a sample set (`what`): `done` of `total` (may be empty).
  std::function<void(const char* what, int done, int total)> progress;
};

// Reduces a local duration to the TP group's maximum (the group finishes together).
using GroupMax = std::function<double(double)>;

std::vector<sched::ChunkSample> profile_fresh_prompts(compute::StageCompute& compute, const GroupMax& group_max,
                                                      const ProfileGrid& grid, int hidden_size);

std::vector<sched::ChunkSample> profile_prefixed_chunks(compute::StageCompute& compute, const GroupMax& group_max,
                                                        const ProfileGrid& grid, int hidden_size);

// Both sample sets as asked, then the fits (sched::fit_stage). Collective over the TP group
// unless the backend answers modelled_seconds (then nothing is run or communicated).
sched::StageCostFit profile_and_fit(int stage, compute::StageCompute& compute, const GroupMax& group_max,
                                    const ProfileGrid& grid, int hidden_size, bool fresh, bool prefixed);

// Tokens (prefix + chunk) a run's profile may use: the longest prompt plus two chunks.
int64_t profile_capacity_tokens(const std::vector<int64_t>& prompt_lengths, int initial_chunk);

// The sizes profile_fresh_prompts times, longest first (exposed for tests).
std::vector<int> fresh_prompt_lengths(const ProfileGrid& grid);

}  // namespace pf::pipeline
