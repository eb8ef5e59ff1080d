// The last stage's per-token scores (--logprobs, --top-k, --token-ids), chunk by chunk: every
// position's final norm and LM head on this rank's vocabulary slice, summarized per row
// (compute/vocab_scores.hpp), the summaries gathered to TP rank 0 and merged. Rows go
// through the LM head in blocks sized so a block's logits stay under a fixed budget: memory
// is O(block x vocab / tp), whatever the chunk and the prompt length.
//
// Alignment: row r of a chunk starting at `start` predicts token start + r + 1, but a
// chunk's message holds the entries of positions [start, start + length): the entry at
// `start` is the previous chunk's last prediction (carried; NaN in the prompt's first chunk,
// which rank 0 fills from the source prompt after a reused prefix), and the chunk's own last prediction is carried to
// the next chunk (dropped after the prompt's last token, which has no successor).
//
// Scored spans: rows that predict positions before the prompt's /score_start skip the LM
// head; their entries are NaN (log-probs, top-k and token-set log-probs) and -1 (top-k ids).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "compute/stage_compute.hpp"
#include "dist/topology.hpp"
#include "io/prompts_h5.hpp"
#include "pipeline/result_route.hpp"
#include "sched/batch_plan.hpp"

namespace pf::pipeline {

class TokenScorer {
 public:
  // `prompts` must hold the token ids on this rank when `layout.logprobs` (share_prompts).
  // `token_set` holds layout.set_size token ids (--token-ids).
  TokenScorer(const dist::Topology& topology, compute::StageCompute& compute, const io::PromptSet& prompts,
              int vocab_size, TokenRowLayout layout, std::vector<int32_t> token_set);
  // Not copied nor moved: summary_shape_ points into token_set_.
  TokenScorer(const TokenScorer&) = delete;
  TokenScorer& operator=(const TokenScorer&) = delete;
  // Collective over the last stage's TP group. Scores micro-batch `mb`'s rows `hidden`
  // [mb.length, H]; on TP rank 0 returns its token part (planar, TokenRowLayout), else empty.
  const std::vector<float>& score(const sched::MicroBatch& mb, const float* hidden, int hidden_size);
  // TP rank 0, with log-probs: the prediction carried to the next chunk (the log-prob of the
  // token after the last chunk scored), what a checkpoint at that boundary keeps.
  float carried() const { return carried_; }

 private:
  void score_block(const sched::MicroBatch& mb, int first_row, int rows, const float* hidden);

  const dist::Topology& topology_;
  compute::StageCompute& compute_;
  const io::PromptSet& prompts_;
  TokenRowLayout layout_;
  std::vector<int32_t> token_set_;
  compute::SummaryShape summary_shape_;  // top-k and token set of every row's summary
  int block_rows_ = 0;                   // rows through the LM head at a time
  size_t record_bytes_;                  // one row's slice summary
  std::vector<int32_t> targets_;         // [block_rows]: the token each row scores (-1: none)
  std::vector<std::byte> summaries_, gathered_;
  std::vector<float> next_logprob_;  // [length]: row r's log-prob of token start + r + 1
  std::vector<float> part_;          // the chunk's token part (TP rank 0)
  std::vector<int32_t> ids_;         // one row's top-k ids, before they are copied into part_
  float carried_ = 0;                // the previous chunk's last prediction
};

}  // namespace pf::pipeline
