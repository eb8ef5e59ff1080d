// The shapes the cuda attention kernel (attention.cu) is built for. Plain C++ with no CUDA
// types: `advise` and the simulator include it in builds without CUDA, so the backend's
// set-up check and the layout search cannot drift apart.
#pragma once

namespace pf::kernels {

constexpr int kAttentionKeyTile = 64;  // keys a tile (attention.cu's kBlockN): pages hold whole tiles

// Head sizes with a compiled instantiation (launch_for_width), and as error messages name them.
constexpr bool attention_head_dim_supported(int head_dim) {
  return head_dim == 32 || head_dim == 48 || head_dim == 64 || head_dim == 128;
}
constexpr const char* kAttentionHeadDims = "32, 48, 64 or 128";

// Whether chunk_attention runs this head size over pages of `page_size` keys.
constexpr bool attention_supports(int head_dim, int page_size) {
  return attention_head_dim_supported(head_dim) && page_size > 0 && page_size % kAttentionKeyTile == 0;
}

}  // namespace pf::kernels
