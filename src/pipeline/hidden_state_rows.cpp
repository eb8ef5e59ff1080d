// --hidden-states on the last stage (see hidden_state_rows.hpp).
#include "pipeline/hidden_state_rows.hpp"

#include <algorithm>
#include <stdexcept>

namespace pf::pipeline {

HiddenStateRows::HiddenStateRows(compute::StageCompute& compute, compute::HiddenStatesKind kind, int hidden_size,
                                 const sched::BatchPlan& plan, Store store)
    : compute_(compute), kind_(kind), h_(hidden_size), row_(hidden_size), sum_(hidden_size), store_(std::move(store)) {
  if (kind_ != compute::HiddenStatesKind::kMean) return;
  save_at_.resize(plan.prompt_lengths.size());
  // Prompts in plan order, so a source's own start is known before its heirs'.
  for (const sched::MicroBatch& mb : plan.micro_batches) {
    if (!mb.is_first || mb.start == 0 || plan.reuse[mb.prompt].restored) continue;
    const int p = mb.prompt;
    const int64_t c = plan.reuse[p].tokens;
    if (plan.reuse[p].store_entry >= 0) {  // loaded from the store: so is its sum
      starts_from_store_[p] = {plan.reuse[p].store_entry, c};
      continue;
    }
    // Up the chain of sources to the prompt that computed position c - 1 itself. A source that
    // reused c tokens or more got them from the prompt its own sum starts from: jump there, so
    // N prompts reusing one prefix cost N steps, not N^2. One that loaded them from the store
    // lends the store's.
    int q = plan.reuse[p].source;
    int entry = -1;
    while (q >= 0 && c <= plan.reuse[q].tokens) {
      if (const auto stored = starts_from_store_.find(q); stored != starts_from_store_.end()) {
        entry = stored->second.first;
        break;
      }
      const auto from = starts_from_.find(q);
      q = from != starts_from_.end() ? from->second.first : plan.reuse[q].source;
    }
    if (entry >= 0) {
      starts_from_store_[p] = {entry, c};
      continue;
    }
    if (q < 0)
      throw std::logic_error("--hidden-states mean: prompt " + std::to_string(p) +
                             " reuses a prefix that no prompt of this plan computes");
    const SumKey key{q, c};
    starts_from_[p] = key;
    if (saved_[key].users++ == 0) save_at_[q].push_back(c);
  }
  for (auto& lengths : save_at_) std::sort(lengths.begin(), lengths.end());
}

void HiddenStateRows::take(const sched::MicroBatch& mb, const float* rows, int count) {
  if (kind_ == compute::HiddenStatesKind::kLast) {
    if (mb.is_last) compute_.final_norm(rows + static_cast<int64_t>(count - 1) * h_, 1, row_.data());
    return;
  }
  if (kind_ != compute::HiddenStatesKind::kMean) return;
  if (count != mb.length) throw std::logic_error("--hidden-states mean: handed some of a chunk's rows, not all");
  const float* hidden = rows;
  normed_.resize(static_cast<size_t>(mb.length) * h_);
  compute_.final_norm(hidden, mb.length, normed_.data());
  if (mb.is_first) {
    std::fill(sum_.begin(), sum_.end(), 0.0);
    if (auto restored = restored_.find(mb.prompt); restored != restored_.end()) {
      if (restored->second.size() != sum_.size())
        throw std::logic_error("--hidden-states mean: a restored sum of another width");
      sum_ = restored->second;
      restored_.erase(restored);
    } else if (auto stored = starts_from_store_.find(mb.prompt); stored != starts_from_store_.end()) {
      sum_ = store_.prefix_sum(stored->second.first, stored->second.second);
    } else if (auto from = starts_from_.find(mb.prompt); from != starts_from_.end()) {
      auto saved = saved_.find(from->second);
      sum_ = saved->second.sum;
      if (--saved->second.users == 0) saved_.erase(saved);
    }
  }
  if (store_.keep_rows) store_.keep_rows(mb.prompt, mb.start, mb.length, normed_.data());
  const std::vector<int64_t>* save_at = save_at_.empty() ? nullptr : &save_at_[mb.prompt];
  auto next_save = save_at ? std::lower_bound(save_at->begin(), save_at->end(), mb.start + 1)
                           : std::vector<int64_t>::const_iterator();
  for (int row = 0; row < mb.length; ++row) {
    const float* normed = normed_.data() + static_cast<int64_t>(row) * h_;
    for (int k = 0; k < h_; ++k) sum_[k] += normed[k];
    if (save_at && next_save != save_at->end() && *next_save == mb.start + row + 1) {
      saved_[{mb.prompt, *next_save}].sum = sum_;  // the sum over positions [0, c)
      ++next_save;
    }
  }
  if (!mb.is_last) return;
  const double positions = static_cast<double>(mb.start + mb.length);
  for (int k = 0; k < h_; ++k) row_[k] = static_cast<float>(sum_[k] / positions);
}

}  // namespace pf::pipeline
