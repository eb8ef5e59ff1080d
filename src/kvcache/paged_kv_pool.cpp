// Page allocation and K/V writes for one stage's cache.
#include "kvcache/paged_kv_pool.hpp"

#include <algorithm>
#include <cstring>

#include "io/bf16.hpp"

namespace pf::kv {

PagedKvPool::PagedKvPool(const KvShape& shape, int num_pages) : shape_(shape), table_(num_pages, shape.page_size) {
  if (shape.element_bytes != 4 && shape.element_bytes != 2)
    throw std::invalid_argument("PagedKvPool: elements of 4 (float) or 2 (bf16) bytes");
  const size_t elements = static_cast<size_t>(num_pages) * shape.layers * shape.floats_per_page_layer();
  (bf16() ? halves_.resize(elements) : floats_.resize(elements));
}

void PagedKvPool::load_rows(int layer, int page, int kv_head, bool value, int64_t offset, int64_t n, float* out) const {
  const int64_t at = element(layer, page, kv_head, value) + offset;
  if (bf16())
    bf16::widen(halves_.data() + at, n, out);
  else
    std::copy_n(floats_.data() + at, n, out);
}

void PagedKvPool::store_rows(int layer, int page, int kv_head, bool value, int64_t offset, int64_t n, const float* in) {
  const int64_t at = element(layer, page, kv_head, value) + offset;
  if (bf16())
    bf16::narrow(in, n, halves_.data() + at);
  else
    std::copy_n(in, n, floats_.data() + at);
}

void PagedKvPool::privatize_page_of(int prompt, int64_t token) {
  const auto [old, fresh] = table_.privatize(prompt, static_cast<size_t>(token / shape_.page_size));
  if (old == fresh) return;
  // A page's elements of every layer are one block (element() puts the page outermost).
  const int64_t block = shape_.layers * shape_.floats_per_page_layer();
  if (bf16())
    std::copy_n(halves_.data() + old * block, block, halves_.data() + fresh * block);
  else
    std::copy_n(floats_.data() + old * block, block, floats_.data() + fresh * block);
}

void PagedKvPool::write(int layer, int prompt, int pos0, int count, const float* k, int64_t k_stride, const float* v,
                        int64_t v_stride) {
  const auto& table = pages(prompt);
  const int d = shape_.head_dim, ps = shape_.page_size;
  for (int t = 0; t < count; ++t) {
    const int pos = pos0 + t;
    const int page = table.at(pos / ps);
    const int64_t slot = static_cast<int64_t>(pos % ps) * d;
    for (int h = 0; h < shape_.kv_heads; ++h) {
      store_rows(layer, page, h, false, slot, d, k + t * k_stride + h * d);
      if (!shape_.latent) store_rows(layer, page, h, true, slot, d, v + t * v_stride + h * d);
    }
  }
}

}  // namespace pf::kv
