// The token rows a stored prompt lends to a later run that scores tokens (--logprobs,
// --top-k). The KV of a prefix gives the logits of the positions after it, but not the scores
// of the prefix's own positions, nor the log-prob of the first new token (predicted at the
// prefix's last position). So an entry stored by a scoring run keeps its prompt's token rows
// beside its KV, as the output holds them: a later prompt that loads c tokens copies rows
// [0, c) and the log-prob entry c, exactly as in-batch reuse copies a source prompt's rows
// (pipeline/stored_results.hpp). "Run the document once, ask new questions tomorrow" then also
// scores the new tokens.
//
//   DIR/<entry>/prompt-000007/scores.json   {"tokens", "logprobs", "top_k", "fnv1a",
//                                            "token_set" (--token-ids: the ids, when it had a set)}
//   DIR/<entry>/prompt-000007/scores.bin    logprobs [tokens] f32, then topk_logprobs [tokens, K]
//                                           f32, then topk_ids [tokens, K] i32, then
//                                           set_logprobs [tokens, S] f32, little-endian
//
// A run with --hidden-states mean needs the sum of the final-norm rows over the loaded prefix,
// at whatever length c the later prompt loads. An entry stored by such a run keeps every
// position's final-norm row (float32, what the last stage sums), and the later run sums rows
// [0, c) itself, in the order the running sum takes them: the same float64 sum, bit for bit.
// (H x 4 bytes a token: 5 % of SmolLM2's KV, 3 % of Llama-3-8B's.)
//
//   DIR/<entry>/prompt-000007/hidden_rows.json  {"tokens", "first", "hidden", "block_rows", "fnv1a": [per block]}
//   DIR/<entry>/prompt-000007/hidden_rows.bin   [tokens - first, hidden] f32
//
// An entry whose prefix another entry holds (kv_store.hpp) keeps the rows from its first
// position on, as it keeps its KV; a sum runs along the chain.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/token_rows.hpp"

namespace pf::kv {

struct ScoresLayout {
  bool logprobs = false;
  int top_k = 0;
  bool hidden_rows = false;        // the final-norm rows (--hidden-states mean)
  std::vector<int32_t> token_set;  // --token-ids (empty: none)
  // entry_scores(verify) only: scores.bin's checksum per kScoresCheckBytes, which
  // read_entry_scores then holds each read to (a file changed after the check is no silent
  // wrong row).
  std::vector<uint64_t> block_fnv1a;
  // Whether these rows serve a run asking for `wanted` (its log-probs, at least its K, its
  // rows, the very same token set).
  bool serves(const ScoresLayout& wanted) const {
    return (logprobs || !wanted.logprobs) && top_k >= wanted.top_k && (hidden_rows || !wanted.hidden_rows) &&
           (wanted.token_set.empty() || token_set == wanted.token_set);
  }
  io::TokenRowShape row_shape() const { return {logprobs, top_k, static_cast<int>(token_set.size())}; }
};

// Reads rows [at, at + count) of the prompt into `rows` (as io::ResultWriter's rows).
using ReadRows = std::function<void(int64_t at, int count, const io::TokenRowsOut& rows)>;

// Writes the rows [0, tokens) of a prompt into `prompt_dir` (durably; throws
// std::runtime_error naming what could not be written).
void write_entry_scores(const std::string& prompt_dir, int64_t tokens, const ScoresLayout& layout,
                        const ReadRows& read);

// What `prompt_dir`'s scores hold, if it has scores of `tokens` positions whose json reads (and,
// with `verify`, whose data are all there and match their checksum: reads them whole);
// nullopt otherwise.
std::optional<ScoresLayout> entry_scores(const std::string& prompt_dir, int64_t tokens, bool verify);
constexpr uint64_t kScoresCheckBytes = uint64_t{1} << 16;  // the pieces of block_fnv1a

// Rows [at, at + count) of `prompt_dir`'s scores (of `stored` layout, `tokens` positions) in
// the `wanted` shape (the first `wanted.top_k` of each row's top-k); throws
// std::runtime_error when they cannot be read.
void read_entry_scores(const std::string& prompt_dir, int64_t tokens, const ScoresLayout& stored, int64_t at, int count,
                       const io::TokenRowShape& wanted, const io::TokenRowsOut& rows);

// Writes a prompt's final-norm rows as they come (positions in order, from 0), on the last
// stage; the json last, once every row is there. Throws std::runtime_error on a failed write.
class HiddenRowsWriter {
 public:
  HiddenRowsWriter(const std::string& prompt_dir, int64_t tokens, int64_t first, int hidden);
  ~HiddenRowsWriter();
  HiddenRowsWriter(const HiddenRowsWriter&) = delete;
  HiddenRowsWriter& operator=(const HiddenRowsWriter&) = delete;
  // Rows [start, start + count), [count, hidden]; the prompt's last rows complete the file.
  void add(int64_t start, int count, const float* rows);

 private:
  std::string dir_;
  int64_t tokens_ = 0, first_ = 0, next_ = 0;
  int hidden_ = 0;
  int fd_ = -1;
  uint64_t block_hash_;
  std::vector<std::string> block_hashes_;
};

// Whether `prompt_dir` says it holds the final-norm rows of positions [first, tokens) of width
// `hidden` (its json only).
bool entry_hidden_rows(const std::string& prompt_dir, int64_t tokens, int64_t first, int hidden);

// One entry of a chain, root first: its prompt directory, its tokens and its first position.
struct HiddenRowsPart {
  std::string prompt_dir;
  int64_t tokens = 0, first = 0;
};
// The float64 sum of rows [0, c) of the chain's final-norm rows (each part's rows from its first
// position to the next part's), each block read checked against its checksum; throws
// std::runtime_error when they cannot be read or fail it.
std::vector<double> sum_entry_hidden_rows(const std::vector<HiddenRowsPart>& chain, int hidden, int64_t c);

}  // namespace pf::kv
