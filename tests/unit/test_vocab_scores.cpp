// The vocabulary-split log-softmax and top-k (compute/vocab_scores.hpp): however the
// vocabulary is cut over TP ranks (evenly, unevenly, slices smaller than k), the merged
// scores equal the full row's log-softmax computed in long double, and the top k is the
// same list (ties to the smaller id), and so are a fixed token set's log-probs (--token-ids);
// a NaN or Inf logit poisons the row's scores.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "compute/vocab_scores.hpp"
#include "model/weights.hpp"

namespace pf::compute {
namespace {

struct Scores {
  float target_logprob = 0;
  std::vector<float> topk_logprobs;
  std::vector<int32_t> topk_ids;
  std::vector<float> set_logprobs;
};

// Summarizes `logits` cut as model::vocab_slice cuts it over `tp` ranks, then merges.
Scores split_and_merge(const std::vector<float>& logits, int tp, int target, int k,
                       const std::vector<int32_t>& token_set = {}) {
  const int vocab = static_cast<int>(logits.size());
  const SummaryShape shape{k, token_set.data(), static_cast<int>(token_set.size())};
  const size_t stride = row_summary_bytes(shape);
  EXPECT_EQ(stride % 8, 0u) << "records keep their headers aligned";
  std::vector<std::byte> records(stride * tp);
  for (int r = 0; r < tp; ++r) {
    const model::VocabSlice slice = model::vocab_slice(vocab, tp, r);
    summarize_row_slice(logits.data() + slice.begin, slice.count, slice.begin, target, shape,
                        records.data() + r * stride);
  }
  Scores s;
  s.topk_logprobs.resize(k);
  s.topk_ids.resize(k);
  s.set_logprobs.resize(token_set.size());
  merge_row_summaries(records.data(), tp, stride, shape,
                      {&s.target_logprob, s.topk_logprobs.data(), s.topk_ids.data(), s.set_logprobs.data()});
  return s;
}

std::vector<long double> exact_logprobs(const std::vector<float>& logits) {
  const long double max = *std::max_element(logits.begin(), logits.end());
  long double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<long double>(x) - max);
  std::vector<long double> out;
  for (float x : logits) out.push_back(x - max - std::log(sum));
  return out;
}

std::vector<int32_t> exact_topk(const std::vector<float>& logits, int k) {
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  ids.resize(k);
  return ids;
}

TEST(VocabScores, MergedSlicesEqualTheFullRow) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 6.0f);
  for (int vocab : {7, 512, 1001, 49152}) {
    std::vector<float> logits(vocab);
    for (float& x : logits) x = normal(rng);
    const std::vector<long double> exact = exact_logprobs(logits);
    const int k = std::min(vocab, 5);
    const std::vector<int32_t> want_ids = exact_topk(logits, k);
    // A token set in no order, with the vocabulary's ends and an odd size (records padded).
    const std::vector<int32_t> token_set = {vocab - 1, 0, vocab / 3, vocab / 2 + 1 < vocab ? vocab / 2 + 1 : 1, 2};
    for (int tp : {1, 2, 3, 4, 7}) {
      for (int target : {0, vocab / 2, vocab - 1}) {
        const Scores s = split_and_merge(logits, tp, target, k, token_set);
        for (size_t j = 0; j < token_set.size(); ++j)
          EXPECT_NEAR(s.set_logprobs[j], static_cast<double>(exact[token_set[j]]), 2e-6)
              << "vocab " << vocab << " tp " << tp << " set entry " << j;
        EXPECT_NEAR(s.target_logprob, static_cast<double>(exact[target]), 2e-6) << "vocab " << vocab << " tp " << tp;
        EXPECT_EQ(s.topk_ids, want_ids) << "vocab " << vocab << " tp " << tp;
        for (int j = 0; j < k; ++j) EXPECT_NEAR(s.topk_logprobs[j], static_cast<double>(exact[want_ids[j]]), 2e-6);
      }
    }
  }
}

TEST(VocabScores, SlicesSmallerThanKAndTiesToTheSmallerId) {
  // 10 tokens over 4 ranks (3, 3, 2, 2 tokens) with k = 6: every slice is smaller than k.
  std::vector<float> logits = {1, 3, 3, 0, 2, 3, -1, 2, 5, 0};
  const std::vector<int32_t> want = {8, 1, 2, 5, 4, 7};  // 5, then the three 3s by id, then the 2s
  for (int tp : {1, 2, 4}) {
    const Scores s = split_and_merge(logits, tp, /*target=*/-1, 6);
    EXPECT_EQ(s.topk_ids, want) << "tp " << tp;
    EXPECT_TRUE(std::isnan(s.target_logprob)) << "no target: NaN";
  }
  const Scores all = split_and_merge(logits, 3, 2, 10);  // k = the whole vocabulary
  float total = 0;
  for (float lp : all.topk_logprobs) total += std::exp(lp);
  EXPECT_NEAR(total, 1.0f, 1e-6f);
  EXPECT_NEAR(all.target_logprob, all.topk_logprobs[2], 1e-7f);  // token 2 is third
}

TEST(VocabScores, ANonFiniteLogitPoisonsTheRow) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    std::vector<float> logits(64, 0.5f);
    logits[40] = bad;
    if (std::isinf(bad) && bad < 0) std::fill(logits.begin(), logits.end(), bad);  // all -inf: no distribution
    const Scores s = split_and_merge(logits, 2, 3, 2, {5, 60});
    EXPECT_FALSE(std::isfinite(s.target_logprob)) << bad;
    EXPECT_FALSE(std::isfinite(s.set_logprobs[0]) || std::isfinite(s.set_logprobs[1])) << bad;
    EXPECT_FALSE(std::isfinite(s.topk_logprobs[0])) << bad;
  }
}

}  // namespace
}  // namespace pf::compute
