// Token rows: what a run that scores tokens keeps for every position of a prompt (--logprobs,
// --top-k, --token-ids), in the output's planar layout. One shape, one view of a block of
// rows, and the rules every holder of rows applies (the writer, the stored results, a resumed
// prompt's checks), so that the arrays travel together instead of as loose pointers.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace pf::io {

// Which token rows a run keeps, and their widths.
struct TokenRowShape {
  bool logprobs = false;  // --logprobs: the token's log-prob [1]
  int top_k = 0;          // --top-k: the k best [k] log-probs and [k] ids
  int set_size = 0;       // --token-ids: the set's log-probs [set_size]

  bool any() const { return logprobs || top_k > 0 || set_size > 0; }
  // Floats of one row in a message (the ids travel as int32 bits).
  int floats_per_token() const { return (logprobs ? 1 : 0) + 2 * top_k + set_size; }
};

// A block of `count` rows of one prompt: planar arrays, null where the shape has none.
// TokenRowsIn is read from, TokenRowsOut written into.
template <bool kConst>
struct TokenRowArrays {
  using Float = std::conditional_t<kConst, const float, float>;
  using Int = std::conditional_t<kConst, const int32_t, int32_t>;
  Float* logprobs = nullptr;       // [count]
  Float* topk_logprobs = nullptr;  // [count, top_k]
  Int* topk_ids = nullptr;         // [count, top_k]
  Float* set_logprobs = nullptr;   // [count, set_size]
};
using TokenRowsIn = TokenRowArrays<true>;
using TokenRowsOut = TokenRowArrays<false>;

// Storage for a block of rows of a shape, reused from block to block.
class TokenRowBuffer {
 public:
  TokenRowsOut resize(const TokenRowShape& shape, int count) {
    const size_t n = static_cast<size_t>(count);
    logprobs_.resize(shape.logprobs ? n : 0);
    topk_logprobs_.resize(n * shape.top_k);
    topk_ids_.resize(n * shape.top_k);
    set_logprobs_.resize(n * shape.set_size);
    return {shape.logprobs ? logprobs_.data() : nullptr, shape.top_k > 0 ? topk_logprobs_.data() : nullptr,
            shape.top_k > 0 ? topk_ids_.data() : nullptr, shape.set_size > 0 ? set_logprobs_.data() : nullptr};
  }

 private:
  std::vector<float> logprobs_, topk_logprobs_, set_logprobs_;
  std::vector<int32_t> topk_ids_;
};

// Rows in a block of rows copied or read back whole (prefix reuse, a resumed prompt, a store
// entry): at most 65,536 and about 64 MiB, whatever the top-k's and the set's widths.
inline int block_rows(const TokenRowShape& shape) {
  const int64_t row_bytes = 4 * static_cast<int64_t>(shape.floats_per_token() > 0 ? shape.floats_per_token() : 1);
  const int64_t rows = (int64_t{64} << 20) / row_bytes;
  return static_cast<int>(rows < 1 ? 1 : rows > 65536 ? 65536 : rows);
}

inline TokenRowsIn as_input(const TokenRowsOut& rows) {
  return {rows.logprobs, rows.topk_logprobs, rows.topk_ids, rows.set_logprobs};
}

// The one rule of a scored span: of rows [start, start + count) of a prompt scored from
// position s (/score_start, s >= 1), the first with a log-prob (position s) and the first that
// goes through the LM head and keeps a top-k and a token set (s - 1: row r predicts position r + 1).
struct ScoredRows {
  int logprobs_from, topk_from;
};
inline ScoredRows scored_rows(int64_t first_scored, int64_t start, int count) {
  const auto within = [count](int64_t v) { return static_cast<int>(v < 0 ? 0 : v > count ? count : v); };
  return {within(first_scored - start), within(first_scored - 1 - start)};
}

inline bool all_finite(const float* values, size_t count) {
  for (size_t i = 0; i < count; ++i)
    if (!std::isfinite(values[i])) return false;
  return true;
}

// Whether every entry of the block's scored part is finite (what is not scored is NaN by rule).
inline bool scored_part_finite(const TokenRowShape& shape, ScoredRows part, int count, const TokenRowsIn& rows) {
  const size_t k = shape.top_k, set = shape.set_size, from = part.topk_from, rows_from = count - part.topk_from;
  return (!rows.logprobs || all_finite(rows.logprobs + part.logprobs_from, count - part.logprobs_from)) &&
         (!rows.topk_logprobs || all_finite(rows.topk_logprobs + from * k, rows_from * k)) &&
         (!rows.set_logprobs || all_finite(rows.set_logprobs + from * set, rows_from * set));
}

// Rows copied from another prompt (or a store entry) that scored more than this one: what
// this prompt does not score becomes what its own computation would give (NaN, id -1).
inline void mask_unscored(const TokenRowShape& shape, ScoredRows part, const TokenRowsOut& rows) {
  const size_t k = shape.top_k, set = shape.set_size, before = part.topk_from;
  for (int i = 0; rows.logprobs && i < part.logprobs_from; ++i) rows.logprobs[i] = NAN;
  for (size_t i = 0; rows.topk_logprobs && i < before * k; ++i) {
    rows.topk_logprobs[i] = NAN;
    rows.topk_ids[i] = -1;
  }
  for (size_t i = 0; rows.set_logprobs && i < before * set; ++i) rows.set_logprobs[i] = NAN;
}

}  // namespace pf::io
