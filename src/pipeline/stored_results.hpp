// World rank 0's ResultSink: every result the pipeline hands back goes into the output file
// (io::ResultWriter), unless it is not finite. A prompt with a NaN or Inf anywhere in its
// logits row, hidden-state row or token scores is not stored (its flag stays unset), and
// is reported; so no output ever holds a NaN the model made (only the NaN that marks a
// prompt's first token in /token_logprobs, which has no log-prob by definition).
//
// Prefix reuse: a prompt that reused c tokens of a source prompt computed no rows before c.
// Its token rows [0, c) and its log-prob entry c are the source's (the same tokens after the
// same prefix, sched/prefix_sharing.hpp), read back from the output, where the source, which
// runs first, has stored them. Copied rows before the prompt's own scored span (/score_start)
// are masked to what its own computation gives there (NaN, id -1).
#pragma once

#include <functional>
#include <vector>

#include "io/results_h5.hpp"
#include "pipeline/result_route.hpp"
#include "sched/batch_plan.hpp"

namespace pf::pipeline {

class StoredResults final : public ResultSink {
 public:
  StoredResults(io::ResultWriter& writer, int vocab_size, int hidden_width, const sched::BatchPlan& plan);

  void token_rows(const TokenRows& rows) override;
  void prompt_row(int prompt, const float* logits, const float* hidden, double ttft_s) override;

  // The prompt a checkpoint restored (pipeline/checkpoint_run.hpp): its rows [0, tokens) are
  // in the output already, and the log-prob entry `tokens` is the one the checkpoint kept.
  void set_restored(int prompt, float next_logprob, bool rows_finite) {
    restored_prompt_ = prompt;
    restored_next_logprob_ = next_logprob;
    restored_rows_finite_ = rows_finite;
  }
  // Where a prefix loaded from the KV store takes its token rows: store entry `entry`'s rows
  // [at, at + count) (pipeline/kv_store_setup.hpp, KvStoreRun::read_scores).
  using StoreRows = std::function<void(int entry, int64_t at, int count, const io::TokenRowsOut& rows)>;
  void set_store_rows(StoreRows rows) { store_rows_ = std::move(rows); }
  // Prompts not stored because a result was not finite, in the order they came.
  const std::vector<int>& nonfinite_prompts() const { return nonfinite_; }

 private:
  // Stores the source's rows [0, c) as the prompt's, and returns its log-prob entry c.
  float copy_reused_rows(const TokenRows& rows, const sched::PrefixReuse& reuse);

  io::ResultWriter& writer_;
  int vocab_size_, hidden_width_;
  const std::vector<sched::PrefixReuse>& reuse_;  // per prompt
  int open_prompt_ = -1;                          // the prompt whose token rows are arriving
  bool open_finite_ = true;                       // its token rows so far are finite
  std::vector<int> nonfinite_;
  StoreRows store_rows_;
  int restored_prompt_ = -1;
  float restored_next_logprob_ = 0;
  bool restored_rows_finite_ = true;
  io::TokenRowBuffer copied_;    // a block of copied rows
  std::vector<float> logprobs_;  // a chunk's patched log-probs
};

}  // namespace pf::pipeline
