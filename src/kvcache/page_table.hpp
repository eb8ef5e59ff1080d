// Page bookkeeping of one stage's KV cache, apart from where the pages live (host floats
// for the CPU pool, device bf16 for the CUDA one): a free list, and per prompt the pages
// covering its tokens in order.
//
// Prefix reuse (sched/prefix_sharing.hpp) lets prompts share pages: `share` hands a later
// prompt the first pages of an earlier one, and a page returns to the free list when the
// last prompt holding it is released. A shared page is never written again: a prompt's own
// tokens start on the page after its shared prefix (the prefix is page-aligned), or (context
// parallelism, where a rank's rows of a prefix need not fill its last page) the prompt takes
// a private copy of that page before it writes there (`privatize`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace pf::kv {

class PageTable {
 public:
  PageTable(int num_pages, int page_size);
  int num_pages() const { return num_pages_; }
  int page_size() const { return page_size_; }
  int free_pages() const { return static_cast<int>(free_list_.size()); }
  int peak_pages_in_use() const { return peak_in_use_; }
  // Grows `prompt`'s table to cover `tokens` tokens. Throws std::logic_error when the pool
  // is exhausted: capacity is checked against the plan before any compute.
  void reserve(int prompt, int64_t tokens);
  // Gives `dest` (which holds no pages yet) the pages of `source` covering its first
  // `tokens` tokens, a multiple of the page size. Costs no page: each is counted once.
  void share(int source, int dest, int64_t tokens);
  // Makes `prompt`'s page `index` its own: when another prompt holds it too, a free page
  // takes its place in the table (the caller copies the contents). Returns {old, new} page
  // ids, or {page, page} when it already was the prompt's alone. Throws like reserve.
  std::pair<int, int> privatize(int prompt, size_t index);
  void release(int prompt);
  const std::vector<int>& pages(int prompt) const;
  // Prompts holding `page` (1 for a page of one prompt, 0 for a free one).
  int holders(int page) const { return holders_.at(static_cast<size_t>(page)); }

 private:
  int num_pages_;
  int page_size_;
  std::vector<int> free_list_;
  std::vector<int> holders_;  // per page
  std::map<int, std::vector<int>> tables_;
  int peak_in_use_ = 0;
};

}  // namespace pf::kv
