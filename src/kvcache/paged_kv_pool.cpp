// Page allocation and K/V writes for one stage's cache.
#include "kvcache/paged_kv_pool.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace pf::kv {

PagedKvPool::PagedKvPool(const KvShape& shape, int num_pages)
    : shape_(shape),
      num_pages_(num_pages),
      storage_(static_cast<size_t>(num_pages) * shape.layers * shape.floats_per_page_layer()) {
  free_list_.reserve(num_pages);
  for (int p = num_pages - 1; p >= 0; --p) free_list_.push_back(p);  // hand out low ids first
}

void PagedKvPool::reserve(int prompt, int64_t tokens) {
  auto& table = tables_[prompt];
  const int needed = shape_.pages_for(tokens);
  if (needed - static_cast<int>(table.size()) > free_pages())
    throw std::logic_error("KV pool exhausted: the capacity check before the run should have prevented this");
  while (static_cast<int>(table.size()) < needed) {
    table.push_back(free_list_.back());
    free_list_.pop_back();
  }
  peak_in_use_ = std::max(peak_in_use_, num_pages_ - free_pages());
}

void PagedKvPool::release(int prompt) {
  auto it = tables_.find(prompt);
  if (it == tables_.end()) return;
  for (int page : it->second) free_list_.push_back(page);
  tables_.erase(it);
}

const std::vector<int>& PagedKvPool::pages(int prompt) const {
  auto it = tables_.find(prompt);
  if (it == tables_.end()) throw std::logic_error("prompt has no KV pages on this stage");
  return it->second;
}

void PagedKvPool::write(int layer, int prompt, int pos0, int count, const float* k, int64_t k_stride, const float* v,
                        int64_t v_stride) {
  const auto& table = pages(prompt);
  const int d = shape_.head_dim, ps = shape_.page_size;
  const int64_t v_offset = shape_.floats_per_page_layer() / 2;
  for (int t = 0; t < count; ++t) {
    const int pos = pos0 + t;
    float* page = base(layer, table.at(pos / ps));
    const int slot = pos % ps;
    for (int h = 0; h < shape_.kv_heads; ++h) {
      std::memcpy(page + head_offset(h) + static_cast<int64_t>(slot) * d, k + t * k_stride + h * d, sizeof(float) * d);
      std::memcpy(page + v_offset + head_offset(h) + static_cast<int64_t>(slot) * d, v + t * v_stride + h * d,
                  sizeof(float) * d);
    }
  }
}

}  // namespace pf::kv
