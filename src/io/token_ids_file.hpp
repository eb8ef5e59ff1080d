// --token-ids FILE: the fixed set of tokens whose log-probs every scored position keeps
// (multiple-choice letters, a distillation vocabulary, calibration classes). The file holds
// token ids as decimal integers separated by whitespace or commas; '[' and ']' are ignored so
// a JSON array works too, and '#' starts a comment to the end of the line.
// scripts/token_ids.py writes one from strings with the model's tokenizer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pf::io {

// At most this many ids: /token_set_logprobs holds 4 bytes per id for every token of the input
// (32 KiB a token at the limit: 4 GiB for 128K tokens), allocated when the output is created.
constexpr int kMaxTokenSet = 8192;

// The ids in the file's order. UserError (naming the file, and the line of a bad entry) for a
// file that cannot be read, an entry that is not a non-negative integer, a repeated id, no
// ids at all, or more than kMaxTokenSet. Ids beyond the model's vocabulary are checked once
// the model is known (check_token_set).
std::vector<int32_t> read_token_ids(const std::string& path);

// UserError when an id of `token_set` (read from `path`) is not a token of a vocabulary of `vocab_size`.
void check_token_set(const std::vector<int32_t>& token_set, int vocab_size, const std::string& path);

}  // namespace pf::io
