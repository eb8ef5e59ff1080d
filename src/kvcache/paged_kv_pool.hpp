// The paged KV cache of one pipeline stage (one TP shard of it). Pages of `page_size`
// tokens are handed to prompts as their chunks arrive and returned when the prompt's last
// chunk has passed the stage. One page id covers the same tokens in every local layer.
//
// Layout of one page of one layer: K as [kv_heads][page_size][head_dim], then V the same,
// so the keys of one head inside a page form a contiguous [page_size, head_dim] matrix
// that attention can hand straight to a GEMM. A latent cache (MLA) has one "head" of
// kv_lora + rope per token and no V half: attention reads the latent as values too.
//
// Elements are float32, or bf16 (element_bytes 2: the cpu backend's --dtype bf16) rounded to
// nearest even on the way in; a bf16 pool's pages are read through load_rows (widened exactly).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "kvcache/page_table.hpp"

namespace pf::kv {

struct KvShape {
  int layers = 0;    // local layers of the stage
  int kv_heads = 0;  // local KV heads of the TP shard
  int head_dim = 0;
  int page_size = 0;      // tokens per page
  int element_bytes = 4;  // float, or bf16 (the GPU's pools; the CPU's with --dtype bf16)
  bool latent = false;    // MLA: keys only, which are also the values
  int64_t floats_per_page_layer() const { return (latent ? 1ll : 2ll) * kv_heads * page_size * head_dim; }
  int64_t bytes_per_page() const { return floats_per_page_layer() * layers * element_bytes; }
  int pages_for(int64_t tokens) const { return static_cast<int>((tokens + page_size - 1) / page_size); }
};

class PagedKvPool {
 public:
  PagedKvPool(const KvShape& shape, int num_pages);

  const KvShape& shape() const { return shape_; }
  int num_pages() const { return table_.num_pages(); }
  int free_pages() const { return table_.free_pages(); }
  int peak_pages_in_use() const { return table_.peak_pages_in_use(); }

  // Page bookkeeping (PageTable): reserve throws std::logic_error when the pool is exhausted.
  void reserve(int prompt, int64_t tokens) { table_.reserve(prompt, tokens); }
  void share(int source, int dest, int64_t tokens) { table_.share(source, dest, tokens); }
  // `prompt`'s page holding token `token` becomes its own (a copy, in every layer, when
  // another prompt holds it too): before a prompt writes into a shared page.
  void privatize_page_of(int prompt, int64_t token);
  void release(int prompt) { table_.release(prompt); }
  const std::vector<int>& pages(int prompt) const { return table_.pages(prompt); }

  // Copies K and V rows of `count` tokens at positions pos0.. into the prompt's pages.
  // k and v are [count, kv_heads * head_dim] with the given row strides (v unused if latent).
  void write(int layer, int prompt, int pos0, int count, const float* k, int64_t k_stride, const float* v,
             int64_t v_stride);

  bool bf16() const { return shape_.element_bytes == 2; }

  // A float pool's pages, in place (std::logic_error on a bf16 pool: use load_rows).
  const float* key_page(int layer, int page, int kv_head) const { return floats(layer, page, kv_head, false); }
  const float* value_page(int layer, int page, int kv_head) const { return floats(layer, page, kv_head, true); }
  // A bf16 pool's pages, in place, as bf16 bits [page_size, head_dim] (std::logic_error on a
  // float pool): for kernels that compute on bf16 itself (attention_bf16_dot.cpp).
  const uint16_t* key_page_bf16(int layer, int page, int kv_head) const { return halves(layer, page, kv_head, false); }
  const uint16_t* value_page_bf16(int layer, int page, int kv_head) const { return halves(layer, page, kv_head, true); }

  // `n` elements of one head's K (or V) block of one page from element `offset` on, as floats:
  // copied from a float pool, widened from a bf16 one; and back (rounded into a bf16 pool).
  void load_rows(int layer, int page, int kv_head, bool value, int64_t offset, int64_t n, float* out) const;
  void store_rows(int layer, int page, int kv_head, bool value, int64_t offset, int64_t n, const float* in);

 private:
  // The element index of one head's K (or V) block of one page of one layer.
  int64_t element(int layer, int page, int kv_head, bool value) const {
    return (static_cast<int64_t>(page) * shape_.layers + layer) * shape_.floats_per_page_layer() +
           (value && !shape_.latent ? shape_.floats_per_page_layer() / 2 : 0) +
           static_cast<int64_t>(kv_head) * shape_.page_size * shape_.head_dim;
  }
  const float* floats(int layer, int page, int kv_head, bool value) const {
    if (bf16()) throw std::logic_error("PagedKvPool: a bf16 pool's pages are read through load_rows");
    return floats_.data() + element(layer, page, kv_head, value);
  }
  const uint16_t* halves(int layer, int page, int kv_head, bool value) const {
    if (!bf16()) throw std::logic_error("PagedKvPool: a float pool has no bf16 pages");
    return halves_.data() + element(layer, page, kv_head, value);
  }

  KvShape shape_;
  PageTable table_;
  std::vector<float> floats_;     // a float pool's elements
  std::vector<uint16_t> halves_;  // a bf16 pool's
};

// A read-only view of one layer of one prompt, what attention needs.
struct KvLayerView {
  const PagedKvPool* pool = nullptr;
  int layer = 0;
  const std::vector<int>* pages = nullptr;
};

}  // namespace pf::kv
