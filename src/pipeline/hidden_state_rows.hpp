// The last stage's --hidden-states result, chunk by chunk, on its TP rank 0 (hidden states
// are identical on every TP rank after the all-reduces): the final norm (the LM head's own,
// StageCompute::final_norm) of the prompt's last position (`last`), or of every position,
// summed in double and divided by the prompt's length at its last chunk (`mean`). A prompt's
// chunks come one after another in the plan, so one running sum at a time suffices: memory is
// O(chunk x hidden), never O(T x hidden), plus the saved sums below.
//
// With prefix reuse a prompt starts at its reused length c, and its mean needs the sum over
// positions [0, c), which the prompt that computed them had on the way: that prompt (its
// source, or the source's source when the source reused c tokens too) keeps a copy of its
// running sum at c for it, dropped once every prompt starting from it has started. One
// hidden-size vector of doubles per distinct (prompt, c) still awaited: with many prompts that
// are prefixes of one another, at most one per page of the longest (32 KiB each at H = 4096).
//
// With --kv-store, a prompt that loads c tokens from a stored entry (or starts from a prompt
// that did, with c within what it loaded) takes the sum over [0, c) from the entry's
// final-norm rows (kvcache/entry_scores.hpp), and every prompt's rows go to the store as
// they are normed, for the runs to come.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "compute/hidden_states.hpp"
#include "compute/stage_compute.hpp"
#include "sched/batch_plan.hpp"

namespace pf::pipeline {

class HiddenStateRows {
 public:
  // `mean` with --kv-store: where a stored prefix's sum comes from, and where rows go.
  struct Store {
    std::function<std::vector<double>(int entry, int64_t c)> prefix_sum;
    std::function<void(int prompt, int64_t start, int count, const float* rows)> keep_rows;
  };
  HiddenStateRows(compute::StageCompute& compute, compute::HiddenStatesKind kind, int hidden_size,
                  const sched::BatchPlan& plan, Store store = {});
  // Takes micro-batch `mb`'s last `count` hidden rows [count, H] (the stage's memory): the
  // prompt's last row on its last chunk for `last`, every row for `mean`.
  void take(const sched::MicroBatch& mb, const float* rows, int count);
  // The prompt's result row [H], valid after take() of its last chunk.
  const float* row() const { return row_.data(); }
  // `mean`: the open prompt's running sum over the positions taken so far (what a checkpoint
  // keeps); empty for `last`, which needs none.
  std::vector<double> running_sum() const {
    return kind_ == compute::HiddenStatesKind::kMean ? sum_ : std::vector<double>();
  }
  // A prompt restored from a checkpoint starts from the sum over its restored positions.
  void restore(int prompt, std::vector<double> sum) { restored_[prompt] = std::move(sum); }

 private:
  using SumKey = std::pair<int, int64_t>;  // (the prompt that computes position c - 1, c)
  struct SavedSum {
    std::vector<double> sum;
    int users = 0;  // prompts yet to start from it
  };

  compute::StageCompute& compute_;
  const compute::HiddenStatesKind kind_;
  const int h_;
  std::vector<float> row_, normed_;
  std::vector<double> sum_;
  std::vector<std::vector<int64_t>> save_at_;                 // per prompt: the lengths c to keep its sum at, ascending
  std::map<int, SumKey> starts_from_;                         // per reusing prompt: the sum it starts from
  std::map<int, std::pair<int, int64_t>> starts_from_store_;  // per prompt: (store entry, c)
  Store store_;
  std::map<SumKey, SavedSum> saved_;
  std::map<int, std::vector<double>> restored_;  // per restored prompt: its sum at the restored position
};

}  // namespace pf::pipeline
