// Per-token scores over a vocabulary split across the TP ranks (--logprobs, --top-k). Each
// rank holds a slice of the LM head, so it sees a slice of every logit row. It summarizes
// its slice of a row in a small fixed-size record (its maximum, the sum of exp(logit - max)
// in double, the target token's logit if the slice holds it, its best k candidates, and the
// logits of a fixed token set (--token-ids) that fall in it); the records of all slices merge
// into the row's log-softmax of the target, its top k and the set. So a row's full logits
// never exist in one place: memory is O(rows x vocab / tp), the traffic O(rows x (k + set))
// per rank.
//
// Order of candidates: the larger logit first, and on a tie the smaller token id, so the
// top k does not depend on how the vocabulary is split.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pf::compute {

// What a row's summary holds beyond its header: `top_k` candidate slots, then one float per
// token of `token_set` [set_size] (global ids; the token's logit when the slice holds it, NaN
// otherwise).
struct SummaryShape {
  int top_k = 0;
  const int32_t* token_set = nullptr;
  int set_size = 0;
};

// One slice's summary of one row: this header, then `candidates` of k candidate slots (in
// no particular order: the merge sorts), then the token set's slots. Made on the host
// (summarize_row_slice) or on the device (kernels/vocab_summary.cu), merged on the host.
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
              "records are packed: header, then k candidates, then the set's floats");

// Bytes of one slice's summary of one row: records are packed at this stride, a multiple of 8
// so that every record's header (its double) stays aligned.
// Where a record's token-set slots begin (after its header and k candidate slots).
constexpr size_t set_slots_offset(int top_k) {
  return sizeof(RowSummaryHeader) + sizeof(RowCandidate) * static_cast<size_t>(top_k);
}
constexpr size_t row_summary_bytes(const SummaryShape& shape) {
  return (set_slots_offset(shape.top_k) + sizeof(float) * static_cast<size_t>(shape.set_size) + 7) / 8 * 8;
}

// Summarizes logits [count] of the slice starting at token id `vocab_begin`. `target` is
// the token whose log-prob is wanted (a global id; -1: none). A NaN or infinite logit makes
// the summary's sum NaN, so every score of the row comes out NaN (caught before storing).
void summarize_row_slice(const float* logits, int count, int vocab_begin, int target, const SummaryShape& shape,
                         std::byte* record);

// Where a merged row's scores go; each may be null when not wanted.
struct MergedRow {
  float* target_logprob = nullptr;  // NaN if no slice held the target
  float* topk_logprobs = nullptr;   // [k], most likely first
  int32_t* topk_ids = nullptr;      // [k]
  float* set_logprobs = nullptr;    // [set_size], in the set's order
};

// Merges the summaries of one row from `slices` ranks (records `stride` bytes apart) into
// the row's log-softmax of its target, its k best tokens and the token set.
void merge_row_summaries(const std::byte* records, int slices, size_t stride, const SummaryShape& shape,
                         const MergedRow& out);

}  // namespace pf::compute
