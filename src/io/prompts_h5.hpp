// Input prompts: /tokens int32 [total] (all prompts back to back) and /offsets int64 [n+1];
// prompt i is tokens[offsets[i]:offsets[i+1]]. Flat + offsets rather than variable-length
// types: parallel HDF5 cannot write VL data and filters cannot compress it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pf::io {

struct PromptSet {
  std::vector<int32_t> tokens;
  std::vector<int64_t> offsets;  // n + 1 entries, offsets[0] == 0
  int num_prompts() const { return static_cast<int>(offsets.size()) - 1; }
  std::vector<int64_t> lengths() const;
};

// Reads and validates: a regular file (a FIFO would block), datasets present, 1-D integer, offsets start at 0, strictly
// increase (no empty prompt) and end at the token count, every id in [0, vocab_size).
// Throws UserError naming the problem.
PromptSet read_prompts(const std::string& path, int vocab_size);

// read_prompts in a forked child process (io/isolated_call.hpp): a libhdf5 crash on a
// corrupt file, or a read that overruns `timeout_s` (0: none), becomes a UserError.
PromptSet read_prompts_isolated(const std::string& path, int vocab_size, double timeout_s = 0);

void write_prompts(const std::string& path, const PromptSet& prompts);

// FNV-1a over the token ids and offsets: identifies an input for --resume.
uint64_t fingerprint(const PromptSet& prompts);

// UserError for a prompt longer than the model's context (max_position_embeddings > 0)
// unless `allow_longer` (positions past it are extrapolation: results may be meaningless).
void check_prompt_lengths(const PromptSet& prompts, int max_position_embeddings, bool allow_longer);

// Silences HDF5's automatic error-stack printing: failures become our own error lines.
void quiet_hdf5_errors();

}  // namespace pf::io
