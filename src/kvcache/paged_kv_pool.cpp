// Page allocation and K/V writes for one stage's cache.
#include "kvcache/paged_kv_pool.hpp"

#include <cstring>

namespace pf::kv {

PagedKvPool::PagedKvPool(const KvShape& shape, int num_pages)
    : shape_(shape),
      table_(num_pages, shape.page_size),
      storage_(static_cast<size_t>(num_pages) * shape.layers * shape.floats_per_page_layer()) {}

void PagedKvPool::write(int layer, int prompt, int pos0, int count, const float* k, int64_t k_stride, const float* v,
                        int64_t v_stride) {
  const auto& table = pages(prompt);
  const int d = shape_.head_dim, ps = shape_.page_size;
  const int64_t v_offset = value_offset();
  for (int t = 0; t < count; ++t) {
    const int pos = pos0 + t;
    float* page = base(layer, table.at(pos / ps));
    const int slot = pos % ps;
    for (int h = 0; h < shape_.kv_heads; ++h) {
      std::memcpy(page + head_offset(h) + static_cast<int64_t>(slot) * d, k + t * k_stride + h * d, sizeof(float) * d);
      if (!shape_.latent)
        std::memcpy(page + v_offset + head_offset(h) + static_cast<int64_t>(slot) * d, v + t * v_stride + h * d,
                    sizeof(float) * d);
    }
  }
}

}  // namespace pf::kv
