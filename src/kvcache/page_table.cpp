// Page allocation for one stage's cache (see page_table.hpp).
#include "kvcache/page_table.hpp"

#include <algorithm>
#include <stdexcept>

namespace pf::kv {

PageTable::PageTable(int num_pages, int page_size) : num_pages_(num_pages), page_size_(page_size) {
  free_list_.reserve(num_pages);
  for (int p = num_pages - 1; p >= 0; --p) free_list_.push_back(p);  // hand out low ids first
}

void PageTable::reserve(int prompt, int64_t tokens) {
  auto& table = tables_[prompt];
  const int needed = static_cast<int>((tokens + page_size_ - 1) / page_size_);
  if (needed - static_cast<int>(table.size()) > free_pages())
    throw std::logic_error("KV pool exhausted: the capacity check before the run should have prevented this");
  while (static_cast<int>(table.size()) < needed) {
    table.push_back(free_list_.back());
    free_list_.pop_back();
  }
  peak_in_use_ = std::max(peak_in_use_, num_pages_ - free_pages());
}

void PageTable::release(int prompt) {
  auto it = tables_.find(prompt);
  if (it == tables_.end()) return;
  for (int page : it->second) free_list_.push_back(page);
  tables_.erase(it);
}

const std::vector<int>& PageTable::pages(int prompt) const {
  auto it = tables_.find(prompt);
  if (it == tables_.end()) throw std::logic_error("prompt has no KV pages on this stage");
  return it->second;
}

}  // namespace pf::kv
