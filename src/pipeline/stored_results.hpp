// World rank 0's ResultSink: every result the pipeline hands back goes into the output file
// (io::ResultWriter), unless it is not finite. A prompt with a NaN or Inf anywhere in its
// logits row, hidden-state row or token scores is not stored (its flag stays unset), and
// is reported; so no output ever holds a NaN the model made (only the NaN that marks a
// prompt's first token in /token_logprobs, which has no log-prob by definition).
#pragma once

#include <vector>

#include "io/results_h5.hpp"
#include "pipeline/result_route.hpp"

namespace pf::pipeline {

class StoredResults final : public ResultSink {
 public:
  StoredResults(io::ResultWriter& writer, int vocab_size, int hidden_width);

  void token_rows(const TokenRows& rows) override;
  void prompt_row(int prompt, const float* logits, const float* hidden, double ttft_s) override;

  // Prompts not stored because a result was not finite, in the order they came.
  const std::vector<int>& nonfinite_prompts() const { return nonfinite_; }

 private:
  io::ResultWriter& writer_;
  int vocab_size_, hidden_width_;
  int open_prompt_ = -1;        // the prompt whose token rows are arriving
  bool open_finite_ = true;     // its token rows so far are finite
  std::vector<int> nonfinite_;
};

}  // namespace pf::pipeline
