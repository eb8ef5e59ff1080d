// Summaries of vocabulary slices and their merge (see vocab_scores.hpp).
#include "compute/vocab_scores.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "compute/cpu/elementwise.hpp"

namespace pf::compute {
namespace {

using Candidate = RowCandidate;
using SummaryHeader = RowSummaryHeader;

// a is the better candidate: a larger logit, or the same logit and a smaller id.
bool better(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

Candidate* candidates_of(std::byte* record) {
  return reinterpret_cast<Candidate*>(record + sizeof(SummaryHeader));
}
const Candidate* candidates_of(const std::byte* record) {
  return reinterpret_cast<const Candidate*>(record + sizeof(SummaryHeader));
}

}  // namespace

void summarize_row_slice(const float* logits, int count, int vocab_begin, int target, const SummaryShape& shape,
                         std::byte* record) {
  const int k = shape.top_k;
  SummaryHeader header{-std::numeric_limits<float>::infinity(), 0.0f, 0, 0, 0.0};
  bool nan = false;  // said explicitly: the fast exp below gives no promise for NaN
  for (int i = 0; i < count; ++i) {
    header.max = logits[i] > header.max ? logits[i] : header.max;
    nan = nan || std::isnan(logits[i]);
  }
  // exp(x - max) <= 1 by the vectorised float exp of the CPU kernels (within 2e-7 of exact),
  // a block at a time, summed in 16 double lanes: no overflow, and the rounding of a
  // 150K-term sum stays far below float32's. (Scalar double exp here took 40 % of a
  // --logprobs run's extra time.) A NaN logit makes the sum NaN (below).
  constexpr int kBlock = 256, kLanes = 16;
  float block[kBlock];
  double lanes[kLanes] = {};
  for (int b0 = 0; b0 < count; b0 += kBlock) {
    const int n = std::min(kBlock, count - b0);
    for (int i = 0; i < n; ++i) block[i] = logits[b0 + i] - header.max;
    cpu::exp_inplace(block, n);
    int i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int l = 0; l < kLanes; ++l) lanes[l] += block[i + l];
    for (; i < n; ++i) lanes[0] += block[i];
  }
  double sum = 0;
  for (double lane : lanes) sum += lane;
  header.sum_exp = count > 0 && !nan && std::isfinite(header.max) ? sum : std::numeric_limits<double>::quiet_NaN();
  if (target >= vocab_begin && target < vocab_begin + count) {
    header.has_target = 1;
    header.target_logit = logits[target - vocab_begin];
  }
  // The k best by a min-heap on "better" (its front is the worst kept): O(count) compares
  // once the heap is full, since few logits beat the k-th best. A row holding NaN has no
  // order (and no scores: its sum is NaN): it gets no candidates, which read as -inf.
  Candidate* heap = candidates_of(record);
  int size = 0;
  const auto worse_first = [](const Candidate& a, const Candidate& b) { return better(a, b); };
  const int ranked = std::isfinite(header.sum_exp) ? count : 0;
  for (int i = 0; i < ranked && k > 0; ++i) {
    const Candidate c{logits[i], vocab_begin + i};
    if (size < k) {
      heap[size++] = c;
      std::push_heap(heap, heap + size, worse_first);
    } else if (better(c, heap[0])) {
      std::pop_heap(heap, heap + size, worse_first);
      heap[size - 1] = c;
      std::push_heap(heap, heap + size, worse_first);
    }
  }
  header.candidates = size;
  std::memcpy(record, &header, sizeof header);
  float* set = reinterpret_cast<float*>(record + set_slots_offset(k));
  for (int s = 0; s < shape.set_size; ++s) {
    const int id = shape.token_set[s];
    set[s] = id >= vocab_begin && id < vocab_begin + count ? logits[id - vocab_begin]
                                                           : std::numeric_limits<float>::quiet_NaN();
  }
}

void merge_row_summaries(const std::byte* records, int slices, size_t stride, const SummaryShape& shape,
                         const MergedRow& out) {
  if (slices < 1) throw std::logic_error("merge_row_summaries: no slices");
  const int k = shape.top_k;
  std::vector<SummaryHeader> headers(slices);
  float max = -std::numeric_limits<float>::infinity();
  for (int s = 0; s < slices; ++s) {
    std::memcpy(&headers[s], records + s * stride, sizeof(SummaryHeader));
    max = std::max(max, headers[s].max);
  }
  // log sum_v exp(x_v) = M + log sum_s exp(m_s - M) sum_s', from every slice's (m_s, sum_s).
  double total = 0;
  for (const SummaryHeader& h : headers) total += h.sum_exp * std::exp(static_cast<double>(h.max) - max);
  const double log_normalizer = max + std::log(total);
  if (out.target_logprob) {
    *out.target_logprob = std::numeric_limits<float>::quiet_NaN();
    for (const SummaryHeader& h : headers)
      if (h.has_target) *out.target_logprob = static_cast<float>(h.target_logit - log_normalizer);
  }
  if (out.set_logprobs)
    for (int j = 0; j < shape.set_size; ++j) {
      // Exactly one slice holds each token; the others' slots are NaN.
      float logit = std::numeric_limits<float>::quiet_NaN();
      for (int s = 0; s < slices; ++s) {
        float slot;
        std::memcpy(&slot, records + s * stride + set_slots_offset(k) + sizeof(float) * j, sizeof slot);
        if (!std::isnan(slot)) logit = slot;
      }
      out.set_logprobs[j] = static_cast<float>(logit - log_normalizer);
    }
  if (k == 0) return;
  std::vector<Candidate> pool;
  for (int s = 0; s < slices; ++s) {
    const Candidate* c = candidates_of(records + s * stride);
    pool.insert(pool.end(), c, c + headers[s].candidates);
  }
  const int kept = std::min<int>(k, static_cast<int>(pool.size()));
  std::partial_sort(pool.begin(), pool.begin() + kept, pool.end(), better);
  for (int j = 0; j < k; ++j) {
    // Fewer tokens than k in the whole vocabulary cannot happen (--top-k is checked against
    // it); the slots would read as id -1, log-prob -inf.
    out.topk_ids[j] = j < kept ? pool[j].id : -1;
    out.topk_logprobs[j] =
        j < kept ? static_cast<float>(pool[j].logit - log_normalizer) : -std::numeric_limits<float>::infinity();
  }
}

}  // namespace pf::compute
