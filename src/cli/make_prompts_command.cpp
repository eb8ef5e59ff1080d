// `pipefill make-prompts`: random prompts (seeded) in the input format.
#include <cstdio>
#include <random>

#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "io/file_checks.hpp"
#include "io/prompts_h5.hpp"
#include "io/replaceable_file.hpp"

namespace pf::cli {

int make_prompts_command(int argc, char** argv) {
  MakePromptsOptions options;
  if (!parse_make_prompts(argc, argv, options)) return 0;
  io::require_writable_file_path(options.out, "--out");  // before the prompts are made, not after
  io::require_replaceable(options.out, "make-prompts", io::StudyFile::kPromptFile);
  std::mt19937_64 rng(options.seed);
  std::uniform_int_distribution<int64_t> length(options.min_len, options.max_len);
  std::uniform_int_distribution<int32_t> token(0, options.vocab - 1);
  io::PromptSet prompts;
  prompts.offsets.push_back(0);
  for (int p = 0; p < options.num; ++p) {
    const int64_t n = length(rng);
    for (int64_t i = 0; i < n; ++i) prompts.tokens.push_back(token(rng));
    prompts.offsets.push_back(static_cast<int64_t>(prompts.tokens.size()));
  }
  io::write_prompts(options.out, prompts);
  std::printf("wrote %s: %d prompts, %zu tokens\n", options.out.c_str(), options.num, prompts.tokens.size());
  return 0;
}

}  // namespace pf::cli
