// Per-token scores over a vocabulary split across the TP ranks (--logprobs, --top-k). Each
// rank holds a slice of the LM head, so it sees a slice of every logit row. It summarizes
// its slice of a row in a small fixed-size record (its maximum, the sum of exp(logit - max)
// in double, the target token's logit if the slice holds it, its best k candidates); the
// records of all slices merge into the row's log-softmax of the target and its top k. So a
// row's full logits never exist in one place: memory is O(rows x vocab / tp), the traffic
// O(rows x k) per rank.
//
// Order of candidates: the larger logit first, and on a tie the smaller token id, so the
// top k does not depend on how the vocabulary is split.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pf::compute {

// One slice's summary of one row: this header, then `candidates` of k candidate slots (in
// no particular order: the merge sorts). Made on the host (summarize_row_slice) or on the
// device (kernels/vocab_summary.cu), merged on the host.
struct RowSummaryHeader {
  float max;           // the slice's largest logit (-inf for none)
  float target_logit;  // when has_target
  int32_t has_target;
  int32_t candidates;  // how many of the k candidate slots are filled (a slice may be smaller than k)
  double sum_exp;      // sum over the slice of exp(logit - max); NaN when a logit is NaN or infinite
};
struct RowCandidate {
  float logit;
  int32_t id;
};
static_assert(sizeof(RowSummaryHeader) == 24 && sizeof(RowCandidate) == 8,
              "records are packed: header, then k candidates");

// Bytes of one slice's summary of one row with `k` candidates (records are packed at this stride).
size_t row_summary_bytes(int k);

// Summarizes logits [count] of the slice starting at token id `vocab_begin`. `target` is
// the token whose log-prob is wanted (a global id; -1: none). A NaN or infinite logit makes
// the summary's sum NaN, so every score of the row comes out NaN (caught before storing).
void summarize_row_slice(const float* logits, int count, int vocab_begin, int target, int k, std::byte* record);

// Merges the summaries of one row from `slices` ranks (records `stride` bytes apart):
// `target_logprob` (NaN if no slice held the target; may be null), and the row's k best
// tokens, most likely first: `topk_logprobs` [k], `topk_ids` [k] (both may be null when k = 0).
void merge_row_summaries(const std::byte* records, int slices, size_t stride, int k, float* target_logprob,
                         float* topk_logprobs, int32_t* topk_ids);

}  // namespace pf::compute
