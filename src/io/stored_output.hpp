// What an existing output file holds, read and verified before a run trusts it (--resume):
// its layout (datasets, types, shapes), the identity it was written with, and which rows are
// complete with a row that matches its checksum. Read in a forked child, so a damaged file
// is a UserError, never a crash of the job.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "io/fnv1a.hpp"

namespace pf::io {

struct OutputLayout;

struct StoredOutput {
  std::vector<char> completed;  // complete and verified
  std::vector<int> torn_rows;   // marked complete, but the row fails its checksum
  // Marked complete by a version that did not store all this layout's datasets (/is_greedy):
  // computed again.
  std::vector<int> stale_rows;
};

// UserError (starting with `path`) if the file was written with another identity (naming
// the first difference), or is not an output of `layout`'s shape.
StoredOutput inspect_output(const std::string& path, const OutputLayout& layout, const nlohmann::json& identity,
                            double timeout_s);

// The first key of `current` that `stored` lacks or holds with another value, or of `stored`
// that `current` lacks, described for an error message ("chunk_size (64, this run: 32)");
// nullopt when they match.
std::optional<std::string> identity_difference(const nlohmann::json& stored, const nlohmann::json& current);
// An identity as resumes compare it: the input's and the model's paths as typed ("in.h5",
// "./in.h5", a moved file) left out where it holds their contents' fingerprints, which decide.
nlohmann::json compared_identity(nlohmann::json identity);

// A prompt's token rows (--logprobs, --top-k), reduced for its row checksum: a hash of each
// dataset's slice of the prompt, streamed in position order (so chunk boundaries do not
// matter), and the per-prompt values derived from them.
struct TokenRowsDigest {
  Fnv1a logprobs, topk_ids, topk_logprobs;
  double nll_sum = 0, perplexity = 0;
  bool with_greedy = false;     // the output has /is_greedy (--logprobs and --top-k)
  unsigned char is_greedy = 1;  // every scored token so far was the top-1
  bool with_set = false;        // the output has /token_set_logprobs (--token-ids)
  Fnv1a set_logprobs;
  // The rows' bytes and NLL (what follows from them aside) equal `other`'s.
  bool same_rows(const TokenRowsDigest& other) const {
    return logprobs.value == other.logprobs.value && topk_ids.value == other.topk_ids.value &&
           topk_logprobs.value == other.topk_logprobs.value && set_logprobs.value == other.set_logprobs.value &&
           nll_sum == other.nll_sum;
  }
};

// The checksum stored per completed row: the logits row's bytes (none without logits), the
// hidden-state row's (none without --hidden-states), the token rows' digest (none without
// token rows; with its /is_greedy byte and its token set's hash when stored) and the TTFT's.
uint64_t row_checksum(const float* row, int vocab_size, const float* hidden_row, int hidden_size, double ttft_s,
                      const TokenRowsDigest* token_rows = nullptr);

}  // namespace pf::io
