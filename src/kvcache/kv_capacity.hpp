// Sizing a stage's KV pool before any compute: the pool must hold the largest prompt
// (a stage holds one prompt's pages at a time, freed when its last chunk passes), within
// the --kv-memory-mb budget. A prompt that cannot fit is a user error found here.
#pragma once

#include <cstdint>
#include <vector>

#include "kvcache/paged_kv_pool.hpp"

namespace pf::kv {

// Pages to allocate: what the longest prompt needs (`rank_tokens`: what this rank's pool holds of
// each prompt). Throws UserError naming the prompt, the stage, its layers and the budget when it
// exceeds budget_mb. `prompt_tokens` (--cp: the whole prompts, of which a rank holds its share)
// lets the message say both.
int pool_pages_for(const KvShape& shape, const std::vector<int64_t>& rank_tokens, int64_t budget_mb, int stage,
                   const std::vector<int64_t>& prompt_tokens = {});

// Pages for profiling: room for `wanted_tokens` (prefix + chunk), within the budget, never
// fewer than `at_least` (what the run itself needs).
int profiling_pages(const KvShape& shape, int64_t wanted_tokens, int64_t budget_mb, int at_least);

}  // namespace pf::kv
