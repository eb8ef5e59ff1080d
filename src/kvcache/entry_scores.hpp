// The token rows a stored prompt lends to a later run that scores tokens (--logprobs,
// --top-k). The KV of a prefix gives the logits of the positions after it, but not the scores
// of the prefix's own positions, nor the log-prob of the first new token (predicted at the
// prefix's last position). So an entry stored by a scoring run keeps its prompt's token rows
// beside its KV, as the output holds them: a later prompt that loads c tokens copies rows
// [0, c) and the log-prob entry c, exactly as in-batch reuse copies a source prompt's rows
// (pipeline/stored_results.hpp). "Run the document once, ask new questions tomorrow" then also
// scores the new tokens.
//
//   DIR/<entry>/prompt-000007/scores.json   {"tokens", "logprobs", "top_k", "fnv1a"}
//   DIR/<entry>/prompt-000007/scores.bin    logprobs [tokens] f32, then topk_logprobs [tokens, K]
//                                           f32, then topk_ids [tokens, K] i32, little-endian
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace pf::kv {

struct ScoresLayout {
  bool logprobs = false;
  int top_k = 0;
  // Whether these rows serve a run asking for `wanted` (its log-probs, and at least its K).
  bool serves(const ScoresLayout& wanted) const { return (logprobs || !wanted.logprobs) && top_k >= wanted.top_k; }
};

// Reads rows [at, at + count) of the prompt into the pointers (as io::ResultWriter's rows).
using ReadRows = std::function<void(int64_t at, int count, float* logprobs, float* topk_logprobs, int32_t* topk_ids)>;

// Writes the rows [0, tokens) of a prompt into `prompt_dir` (durably; throws
// std::runtime_error naming what could not be written).
void write_entry_scores(const std::string& prompt_dir, int64_t tokens, ScoresLayout layout, const ReadRows& read);

// What `prompt_dir`'s scores hold, if it has scores of `tokens` positions whose json reads (and,
// with `verify`, whose data are all there and match their checksum: reads them whole);
// nullopt otherwise.
std::optional<ScoresLayout> entry_scores(const std::string& prompt_dir, int64_t tokens, bool verify);

// Rows [at, at + count) of `prompt_dir`'s scores (of `stored` layout, `tokens` positions), the
// first `top_k` of each row's top-k; throws std::runtime_error when they cannot be read.
void read_entry_scores(const std::string& prompt_dir, int64_t tokens, ScoresLayout stored, int64_t at, int count,
                       int top_k, float* logprobs, float* topk_logprobs, int32_t* topk_ids);

}  // namespace pf::kv
