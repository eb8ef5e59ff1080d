// Hidden-state slots between stages (dist::Transport): how many a stage's loop holds at
// once and how many rows each holds. What `run` allocates (cli/run_prepare.cpp) and what the
// memory model counts (sim/gpu_memory.cpp), decided here once.
#pragma once

#include "sched/context_split.hpp"

namespace pf::sched {

// The most slots a stage holds at once with `depth` receives posted ahead and `depth` sends
// in flight (pipeline/stage_loop.cpp): stage 0 the one it fills and its sends, the last
// stage its posted receives (the one it computes among them), a middle stage both; a stage
// that is the whole pipeline, one.
inline int hidden_slots_held(int depth, bool first_stage, bool last_stage) {
  if (first_stage && last_stage) return 1;
  if (first_stage) return depth + 1;
  if (last_stage) return depth;
  return 2 * depth;
}

// Whether the last stage reads every row of a chunk (per-token scores, or the mean of the
// hidden states) or only a prompt's last row, on its last chunk (StageLoop::rows_read).
inline bool last_stage_reads_every_row(bool token_scores, bool hidden_mean) {
  return token_scores || hidden_mean;
}

// Whether the last stage's last layer can finish only the rows read once every row's K/V are
// in the cache (compute::OutputRows, LayerOps::keep_rows_from): not MLA's latent path, which
// runs every row, nor under CP, where a chunk's attention is the CP group's collective.
inline bool last_layer_narrows(bool latent_attention, bool context_parallel) {
  return !latent_attention && !context_parallel;
}

// Rows a slot holds on a rank, for chunks up to `longest_chunk`: its CP share of them, but
// the whole chunk where the CP ranks' rows are all gathered into it (the last stage's CP
// rank 0 when it reads every row: StageLoop::gather_cp_rows).
inline int hidden_slot_rows(int longest_chunk, int cp, bool gathers_chunk) {
  return cp > 1 && !gathers_chunk ? cp_most_rows(longest_chunk, cp) : longest_chunk;
}

}  // namespace pf::sched
