// Input prompts: /tokens int32 [total] (all prompts back to back) and /offsets int64 [n+1];
// prompt i is tokens[offsets[i]:offsets[i+1]]. Flat + offsets rather than variable-length
// types: parallel HDF5 cannot write VL data and filters cannot compress it.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace pf::io {

struct PromptSet {
  std::vector<int32_t> tokens;
  std::vector<int64_t> offsets;  // n + 1 entries, offsets[0] == 0
  // Optional /score_start [n]: prompt i's token scores cover positions [score_start[i],
  // length) (a context and its continuation: only the continuation is scored); empty: every
  // position that has a log-prob (from 1).
  std::vector<int64_t> score_start;
  // Optional /ids [n] (UTF-8 strings): what the user calls each prompt, copied to the output.
  std::vector<std::string> ids;
  int num_prompts() const { return static_cast<int>(offsets.size()) - 1; }
  std::vector<int64_t> lengths() const;
  int64_t first_scored(int prompt) const { return score_start.empty() ? 1 : score_start.at(prompt); }
  // The first row whose log-probs are read (it predicts first_scored): the LM head's rows of a
  // job that scores tokens are [this, length).
  int64_t first_scored_row(int prompt) const { return first_scored(prompt) - 1; }
};

// Reads and validates: a regular file (a FIFO would block), datasets present, 1-D integer, offsets start at 0, strictly
// increase (no empty prompt) and end at the token count, every id in [0, vocab_size); when
// present, /score_start holds n entries with 1 <= score_start[i] < length_i (or 1, the default,
// whatever the length), and /ids n strings.
// Throws UserError naming the problem.
PromptSet read_prompts(const std::string& path, int vocab_size);

// read_prompts in a forked child process (io/isolated_call.hpp): a libhdf5 crash on a
// corrupt file, or a read that overruns `timeout_s` (0: none), becomes a UserError.
PromptSet read_prompts_isolated(const std::string& path, int vocab_size, double timeout_s = 0);

void write_prompts(const std::string& path, const PromptSet& prompts);
// A 1-D dataset of variable-length UTF-8 strings (/ids of an input and of an output).
void write_strings(hid_t file, const char* name, const std::vector<std::string>& strings);

// The root attribute that names the program which wrote a prompt file (scripts/tokenize.py
// writes it too): make-prompts replaces only its own, and files that name none (written
// before it did), never a tokenized corpus (io/replaceable_file.hpp).
constexpr const char* kGeneratorAttribute = "created_by";
constexpr const char* kMakePromptsGenerator = "pipefill make-prompts";

// FNV-1a over the token ids and offsets (then the score starts and the ids, when the input
// has them): identifies an input for --resume.
uint64_t fingerprint(const PromptSet& prompts);

// UserError for a prompt longer than the model's context (max_position_embeddings > 0)
// unless `allow_longer` (positions past it are extrapolation: results may be meaningless).
void check_prompt_lengths(const PromptSet& prompts, int max_position_embeddings, bool allow_longer);

// Silences HDF5's automatic error-stack printing: failures become our own error lines.
void quiet_hdf5_errors();

}  // namespace pf::io
