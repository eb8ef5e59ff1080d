// Storing the results on world rank 0 (see stored_results.hpp).
#include "pipeline/stored_results.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>

namespace pf::pipeline {

StoredResults::StoredResults(io::ResultWriter& writer, int vocab_size, int hidden_width, const sched::BatchPlan& plan)
    : writer_(writer), vocab_size_(vocab_size), hidden_width_(hidden_width), reuse_(plan.reuse) {}

void StoredResults::token_rows(const TokenRows& given) {
  TokenRows rows = given;
  const sched::PrefixReuse reuse = reuse_.at(rows.prompt);
  const bool first = rows.start == reuse.tokens;  // the prompt's first computed rows
  if (first) {
    open_prompt_ = rows.prompt;
    open_finite_ = true;
    if (reuse.tokens > 0) {
      const bool restored = reuse.restored && rows.prompt == restored_prompt_;
      if (reuse.restored && !restored) throw std::logic_error("token rows of a restored prompt without its state");
      if (restored) open_finite_ = restored_rows_finite_;
      const float entry = restored ? restored_next_logprob_ : copy_reused_rows(rows, reuse);
      if (rows.data.logprobs) {  // the chunk's first entry is the source's prediction (NaN on the wire)
        logprobs_.assign(rows.data.logprobs, rows.data.logprobs + rows.count);
        logprobs_[0] = rows.start < writer_.layout().first_scored(rows.prompt) ? NAN : entry;
        rows.data.logprobs = logprobs_.data();
      }
    }
  }
  // Positions before the scored span have no log-prob (NaN; position 0 never has one) and rows
  // before it no top-k nor token set (the scorer skipped them); every other entry must be finite.
  const io::ScoredRows part = io::scored_rows(writer_.layout().first_scored(rows.prompt), rows.start, rows.count);
  open_finite_ = open_finite_ && io::scored_part_finite(rows.shape, part, rows.count, rows.data);
  // Written even when not finite: the prompt's flag is what makes rows count, and it stays unset.
  writer_.write_token_rows(rows.prompt, rows.start, rows.count, rows.data);
}

// In blocks of io::block_rows, so a million-token prefix with a large --top-k or token set stays small.
float StoredResults::copy_reused_rows(const TokenRows& rows, const sched::PrefixReuse& reuse) {
  const int64_t block = io::block_rows(rows.shape);
  if (reuse.source < 0 && (reuse.store_entry < 0 || !store_rows_))
    throw std::logic_error("token rows of a prefix that no prompt of this run computed nor the store holds");
  const int64_t first_scored = writer_.layout().first_scored(rows.prompt);
  for (int64_t at = 0; at <= reuse.tokens; at += block) {
    // One row past the prefix when it is in this block: the source's log-prob entry c.
    const int count = static_cast<int>(std::min(block, reuse.tokens + 1 - at));
    const io::TokenRowsOut block = copied_.resize(rows.shape, count);
    if (reuse.source >= 0)
      writer_.read_token_rows(reuse.source, at, count, block);
    else  // a stored prompt's rows (kvcache/entry_scores.hpp)
      store_rows_(reuse.store_entry, at, count, block);
    const int stored = static_cast<int>(std::min<int64_t>(count, reuse.tokens - at));
    io::mask_unscored(rows.shape, io::scored_rows(first_scored, at, count), block);
    open_finite_ = open_finite_ && io::scored_part_finite(rows.shape, io::scored_rows(first_scored, at, stored), stored,
                                                          io::as_input(block));
    writer_.write_token_rows(rows.prompt, at, stored, io::as_input(block));
    if (at + count > reuse.tokens) return block.logprobs ? block.logprobs[stored] : NAN;
  }
  return NAN;  // not reached: the last block holds entry c
}

void StoredResults::prompt_row(int prompt, const float* logits, const float* hidden, double ttft_s) {
  const bool finite = (!logits || io::all_finite(logits, vocab_size_)) &&
                      (!hidden || io::all_finite(hidden, hidden_width_)) && (open_prompt_ != prompt || open_finite_);
  if (!finite) {
    nonfinite_.push_back(prompt);
    return;
  }
  const sched::PrefixReuse& reuse = reuse_.at(prompt);
  writer_.write_prompt(prompt, logits, hidden, ttft_s, reuse.restored ? 0 : reuse.tokens,
                       reuse.restored ? reuse.tokens : 0);
}

}  // namespace pf::pipeline
