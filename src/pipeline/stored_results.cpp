// Storing the results on world rank 0 (see stored_results.hpp).
#include "pipeline/stored_results.hpp"

#include <cmath>
#include <cstdint>

namespace pf::pipeline {

namespace {

bool all_finite(const float* values, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    if (!std::isfinite(values[i])) return false;
  return true;
}

}  // namespace

StoredResults::StoredResults(io::ResultWriter& writer, int vocab_size, int hidden_width)
    : writer_(writer), vocab_size_(vocab_size), hidden_width_(hidden_width) {}

void StoredResults::token_rows(const TokenRows& rows) {
  if (rows.start == 0) {
    open_prompt_ = rows.prompt;
    open_finite_ = true;
  }
  // The prompt's first position has no log-prob (NaN by definition); every other must be finite.
  const int skip = rows.start == 0 ? 1 : 0;
  if (rows.logprobs) open_finite_ = open_finite_ && all_finite(rows.logprobs + skip, rows.count - skip);
  if (rows.topk_logprobs)
    open_finite_ = open_finite_ && all_finite(rows.topk_logprobs, static_cast<int64_t>(rows.count) * rows.top_k);
  // Written even when not finite: the prompt's flag is what makes rows count, and it stays unset.
  writer_.write_token_rows(rows.prompt, rows.start, rows.count, rows.logprobs, rows.topk_logprobs, rows.topk_ids);
}

void StoredResults::prompt_row(int prompt, const float* logits, const float* hidden, double ttft_s) {
  const bool finite = (!logits || all_finite(logits, vocab_size_)) && (!hidden || all_finite(hidden, hidden_width_)) &&
                      (open_prompt_ != prompt || open_finite_);
  if (!finite) {
    nonfinite_.push_back(prompt);
    return;
  }
  writer_.write_prompt(prompt, logits, hidden, ttft_s);
}

}  // namespace pf::pipeline
