// Page allocation for one stage's cache (see page_table.hpp).
#include "kvcache/page_table.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace pf::kv {

PageTable::PageTable(int num_pages, int page_size)
    : num_pages_(num_pages), page_size_(page_size), holders_(static_cast<size_t>(num_pages), 0) {
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
    holders_[static_cast<size_t>(free_list_.back())] = 1;
    free_list_.pop_back();
  }
  peak_in_use_ = std::max(peak_in_use_, num_pages_ - free_pages());
}

void PageTable::share(int source, int dest, int64_t tokens) {
  if (tokens % page_size_ != 0)
    throw std::logic_error("PageTable::share: a shared prefix must end on a page boundary, not at token " +
                           std::to_string(tokens));
  const std::vector<int>& from = pages(source);
  const size_t count = static_cast<size_t>(tokens / page_size_);
  if (count > from.size()) throw std::logic_error("PageTable::share: the source prompt holds fewer pages");
  auto& table = tables_[dest];
  if (!table.empty()) throw std::logic_error("PageTable::share: the prompt already holds pages");
  table.assign(from.begin(), from.begin() + static_cast<std::ptrdiff_t>(count));
  for (int page : table) ++holders_[static_cast<size_t>(page)];
}

std::pair<int, int> PageTable::privatize(int prompt, size_t index) {
  std::vector<int>& table = tables_.at(prompt);
  const int old = table.at(index);
  if (holders_[static_cast<size_t>(old)] == 1) return {old, old};
  if (free_list_.empty())
    throw std::logic_error("KV pool exhausted: the capacity check before the run should have prevented this");
  const int fresh = free_list_.back();
  free_list_.pop_back();
  holders_[static_cast<size_t>(fresh)] = 1;
  --holders_[static_cast<size_t>(old)];
  table[index] = fresh;
  peak_in_use_ = std::max(peak_in_use_, num_pages_ - free_pages());
  return {old, fresh};
}

void PageTable::release(int prompt) {
  auto it = tables_.find(prompt);
  if (it == tables_.end()) return;
  for (int page : it->second)
    if (--holders_[static_cast<size_t>(page)] == 0) free_list_.push_back(page);
  tables_.erase(it);
}

const std::vector<int>& PageTable::pages(int prompt) const {
  auto it = tables_.find(prompt);
  if (it == tables_.end()) throw std::logic_error("prompt has no KV pages on this stage");
  return it->second;
}

}  // namespace pf::kv
