// The output file's format, declared once. Every dataset of an output is a row of one table
// (output_format.cpp): its name, element type, shape (as a function of the run's layout), when
// it is present, what a new file holds before a prompt is stored, and what it means. The
// writer creates, reopens and closes from it (results_h5.cpp), --resume inspects from it
// (stored_output.cpp), and docs/formats.md's table is rendered from it (a unit test keeps the
// two equal). A new dataset is one new row, plus the code that writes it.
#pragma once

#include <hdf5.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "io/token_rows.hpp"

namespace pf::io {

// The shape an output of this run has: which datasets it holds (Presence) and their sizes.
struct OutputLayout {
  int num_prompts = 0;
  int vocab_size = 0;
  bool with_logits = true;      // false: the emulate backend computes no logits
  int hidden_size = 0;          // --hidden-states: the width of its rows; 0: not stored
  bool token_logprobs = false;  // --logprobs: per-token log-probs and per-prompt NLL and perplexity
  int top_k = 0;                // --top-k: candidates per token; 0: not stored
  // With token rows: the input's /offsets (n + 1 entries), prompt p's rows are [offsets[p], offsets[p + 1]).
  std::vector<int64_t> prompt_offsets;
  // With token rows: the input's /score_start (empty: every prompt scored from position 1).
  std::vector<int64_t> score_start;
  // With /is_greedy: the input's token ids (not owned), which the top-1 of each row is compared with.
  const std::vector<int32_t>* tokens = nullptr;
  std::vector<std::string> ids;  // the input's /ids (empty: it has none)

  // --token-ids: the token set whose log-probs every scored row keeps (empty: none).
  std::vector<int32_t> token_set;

  TokenRowShape row_shape() const { return {token_logprobs, top_k, static_cast<int>(token_set.size())}; }
  bool token_rows() const { return row_shape().any(); }
  bool is_greedy() const { return token_logprobs && top_k > 0; }
  int64_t first_scored(int prompt) const { return score_start.empty() ? 1 : score_start.at(prompt); }
  int64_t total_tokens() const { return prompt_offsets.empty() ? 0 : prompt_offsets.back(); }
};

// The datasets, in the order of the docs' table.
enum class Dataset : int {
  kLogits,
  kHiddenStates,
  kTokenLogprobs,
  kNllSum,
  kPerplexity,
  kScoreStart,
  kIsGreedy,
  kTopkIds,
  kTopkLogprobs,
  kTokenSetIds,
  kTokenSetLogprobs,
  kCompleted,
  kRowChecksum,
  kTtft,
  kReusedTokens,
  kRestoredTokens,
  kIds,
  kTimeline,
};
constexpr int kNumDatasets = static_cast<int>(Dataset::kTimeline) + 1;

enum class Element { kFloat32, kFloat64, kInt32, kInt64, kUint8, kUint64, kCompound, kString };
// The first dimension: n, T, the token set's size S, or the timeline's events.
enum class Rows { kPrompts, kTokens, kTokenSet, kEvents };
enum class Width { kNone, kVocab, kHidden, kTopK, kTokenSet };  // the second dimension, if any
enum class Presence {
  kAlways,
  kWithLogits,
  kWithHiddenStates,
  kWithLogprobs,
  kWithTopK,
  kWithTokenSet,   // --token-ids
  kWithTokenRows,  // --logprobs, --top-k or --token-ids
  kWithGreedy,     // --logprobs and --top-k
  kWithIds,        // the input has /ids
};
// What a new file holds in each entry before the prompt's row is stored; kNone: nothing is
// written (the row is written before its flag says so). kAtFinish: the dataset is written
// whole when every prompt is done (the timeline), not at creation. kFromInput: written whole
// at creation from what the run was given (/score_start from the input, /token_set_ids from
// --token-ids).
enum class Initial { kNone, kZero, kNaN, kMinusOne, kAtFinish, kFromInput };

struct DatasetSpec {
  Dataset id;
  const char* name;  // without the leading '/'
  Element element;
  Rows rows;
  Width width;
  Presence presence;
  Initial initial;
  // Added to the format after outputs existed: a partial file begun without it gets it on
  // --resume (created as a new file would hold it) instead of being refused.
  bool added_later;
  const char* meaning;  // the docs' text (markdown)
};

const std::array<DatasetSpec, kNumDatasets>& output_datasets();
const DatasetSpec& dataset_spec(Dataset id);

// Whether an output of `layout` has the dataset. The timeline is always present in a finished
// file; it is not among the datasets a partial file holds (see Initial::kAtFinish).
bool present_in(const DatasetSpec& spec, const OutputLayout& layout);
// Whether a partial file of `layout` holds it from its creation (present, and not written
// only at the finish like the timeline).
bool held_while_partial(const DatasetSpec& spec, const OutputLayout& layout);
// Its dimensions for `layout` (a per-prompt or per-token dataset; not the timeline).
std::vector<hsize_t> dataset_dims(const DatasetSpec& spec, const OutputLayout& layout);

hid_t file_type(Element element);    // the little-endian type stored in the file
hid_t memory_type(Element element);  // the native type read and written
H5T_class_t type_class(Element element);
size_t element_size(Element element);

// docs/formats.md's table of the output's datasets (markdown, header included).
std::string output_format_table();

}  // namespace pf::io
