// Page bookkeeping of one stage's KV cache, apart from where the pages live (host floats
// for the CPU pool, device bf16 for the CUDA one): a free list, and per prompt the pages
// covering its tokens in order.
#pragma once

#include <cstdint>
#include <map>
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
  void release(int prompt);
  const std::vector<int>& pages(int prompt) const;

 private:
  int num_pages_;
  int page_size_;
  std::vector<int> free_list_;
  std::map<int, std::vector<int>> tables_;
  int peak_in_use_ = 0;
};

}  // namespace pf::kv
