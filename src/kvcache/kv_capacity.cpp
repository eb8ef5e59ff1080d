// KV capacity check.
#include "kvcache/kv_capacity.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "errors.hpp"

namespace pf::kv {

int pool_pages_for(const KvShape& shape, const std::vector<int64_t>& rank_tokens, int64_t budget_mb, int stage,
                   const std::vector<int64_t>& prompt_tokens) {
  const int64_t budget_pages = (budget_mb << 20) / shape.bytes_per_page();
  int needed = 0;
  for (size_t p = 0; p < rank_tokens.size(); ++p) {
    const int pages = shape.pages_for(rank_tokens[p]);
    if (pages > budget_pages) {
      const double need_mb = static_cast<double>(pages) * shape.bytes_per_page() / (1 << 20);
      const bool shared = p < prompt_tokens.size() && prompt_tokens[p] != rank_tokens[p];
      const std::string tokens = shared ? std::to_string(prompt_tokens[p]) + " tokens, " +
                                              std::to_string(rank_tokens[p]) + " of them in each CP rank's pool"
                                        : std::to_string(rank_tokens[p]) + " tokens";
      throw UserError("prompt " + std::to_string(p) + " (" + tokens + ") needs " +
                      std::to_string(static_cast<long long>(std::ceil(need_mb))) +
                      " MiB of KV cache per rank on stage " + std::to_string(stage) + " (its " +
                      std::to_string(shape.layers) + " layers) but --kv-memory-mb is " + std::to_string(budget_mb) +
                      "; raise it, or spread the cache over more ranks: --cp (its tokens), --pp (the layers) or "
                      "--tp (the KV heads)");
    }
    if (pages > needed) needed = pages;
  }
  return needed;
}

int profiling_pages(const KvShape& shape, int64_t wanted_tokens, int64_t budget_mb, int at_least) {
  const int64_t budget_pages = (budget_mb << 20) / shape.bytes_per_page();
  return static_cast<int>(std::max<int64_t>(at_least, std::min<int64_t>(budget_pages, shape.pages_for(wanted_tokens))));
}

}  // namespace pf::kv
