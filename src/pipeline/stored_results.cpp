// Storing the results on world rank 0 (see stored_results.hpp).
#include "pipeline/stored_results.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>

namespace pf::pipeline {

namespace {

bool all_finite(const float* values, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    if (!std::isfinite(values[i])) return false;
  return true;
}

// Rows copied from another prompt (or a store entry) that scored more than this one: what
// this prompt does not score becomes what its own computation would give (NaN, id -1).
void mask_unscored(io::ScoredRows part, int k, float* logprobs, float* topk_logprobs, int32_t* topk_ids) {
  if (logprobs) std::fill(logprobs, logprobs + part.logprobs_from, NAN);
  if (k > 0) {
    std::fill(topk_logprobs, topk_logprobs + static_cast<size_t>(part.topk_from) * k, NAN);
    std::fill(topk_ids, topk_ids + static_cast<size_t>(part.topk_from) * k, -1);
  }
}

}  // namespace

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
      if (rows.logprobs) {  // the chunk's first entry is the source's prediction (NaN on the wire)
        logprobs_.assign(rows.logprobs, rows.logprobs + rows.count);
        logprobs_[0] = rows.start < writer_.layout().first_scored(rows.prompt) ? NAN : entry;
        rows.logprobs = logprobs_.data();
      }
    }
  }
  // Positions before the scored span have no log-prob (NaN; position 0 never has one) and rows
  // before it no top-k (the scorer skipped them); every other entry must be finite.
  const io::ScoredRows part = io::scored_rows(writer_.layout().first_scored(rows.prompt), rows.start, rows.count);
  if (rows.logprobs)
    open_finite_ = open_finite_ && all_finite(rows.logprobs + part.logprobs_from, rows.count - part.logprobs_from);
  if (rows.topk_logprobs)
    open_finite_ = open_finite_ && all_finite(rows.topk_logprobs + static_cast<size_t>(part.topk_from) * rows.top_k,
                                              static_cast<int64_t>(rows.count - part.topk_from) * rows.top_k);
  // Written even when not finite: the prompt's flag is what makes rows count, and it stays unset.
  writer_.write_token_rows(rows.prompt, rows.start, rows.count, rows.logprobs, rows.topk_logprobs, rows.topk_ids);
}

// In blocks of at most 64K rows, so a million-token prefix with a large --top-k stays small.
float StoredResults::copy_reused_rows(const TokenRows& rows, const sched::PrefixReuse& reuse) {
  constexpr int64_t kBlockRows = 65536;
  if (reuse.source < 0 && (reuse.store_entry < 0 || !store_rows_))
    throw std::logic_error("token rows of a prefix that no prompt of this run computed nor the store holds");
  const size_t k = static_cast<size_t>(rows.top_k);
  for (int64_t at = 0; at <= reuse.tokens; at += kBlockRows) {
    // One row past the prefix when it is in this block: the source's log-prob entry c.
    const int count = static_cast<int>(std::min(kBlockRows, reuse.tokens + 1 - at));
    logprobs_.resize(count);
    topk_logprobs_.resize(count * k);
    topk_ids_.resize(count * k);
    if (reuse.source >= 0)
      writer_.read_token_rows(reuse.source, at, count, logprobs_.data(), topk_logprobs_.data(), topk_ids_.data());
    else  // a stored prompt's rows (kvcache/entry_scores.hpp)
      store_rows_(reuse.store_entry, at, count, rows.logprobs ? logprobs_.data() : nullptr,
                  k > 0 ? topk_logprobs_.data() : nullptr, k > 0 ? topk_ids_.data() : nullptr);
    const int stored = static_cast<int>(std::min<int64_t>(count, reuse.tokens - at));
    const io::ScoredRows part = io::scored_rows(writer_.layout().first_scored(rows.prompt), at, count);
    mask_unscored(part, static_cast<int>(k), rows.logprobs ? logprobs_.data() : nullptr, topk_logprobs_.data(),
                  topk_ids_.data());
    const io::ScoredRows kept = io::scored_rows(writer_.layout().first_scored(rows.prompt), at, stored);
    if (rows.logprobs)
      open_finite_ = open_finite_ && all_finite(logprobs_.data() + kept.logprobs_from, stored - kept.logprobs_from);
    if (k > 0)
      open_finite_ = open_finite_ && all_finite(topk_logprobs_.data() + kept.topk_from * k,
                                                static_cast<int64_t>(stored - kept.topk_from) * k);
    writer_.write_token_rows(rows.prompt, at, stored, rows.logprobs ? logprobs_.data() : nullptr,
                             k > 0 ? topk_logprobs_.data() : nullptr, k > 0 ? topk_ids_.data() : nullptr);
    if (at + count > reuse.tokens) return logprobs_[stored];
  }
  return NAN;  // not reached: the last block holds entry c
}

void StoredResults::prompt_row(int prompt, const float* logits, const float* hidden, double ttft_s) {
  const bool finite = (!logits || all_finite(logits, vocab_size_)) && (!hidden || all_finite(hidden, hidden_width_)) &&
                      (open_prompt_ != prompt || open_finite_);
  if (!finite) {
    nonfinite_.push_back(prompt);
    return;
  }
  const sched::PrefixReuse& reuse = reuse_.at(prompt);
  writer_.write_prompt(prompt, logits, hidden, ttft_s, reuse.restored ? 0 : reuse.tokens,
                       reuse.restored ? reuse.tokens : 0);
}

}  // namespace pf::pipeline
