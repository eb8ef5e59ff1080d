// The outer loop our three GEMMs share (gemm_f32_avx512.cpp, gemm_f32_avx2.cpp,
// gemm_bf16_dot.cpp): y[:, begin..end) = x W[begin..end)^T a block of output columns at a time.
// Each block is packed once and every row of x passes over it, a tile of Kernel::kTileRows rows
// at a time, then the rows left over. The next block's weight rows are fetched into L2 under
// this block's tiles, a slice per tile (Zen 4, SmolLM2 4K, one core, five runs each
// alternating: pack_block 3.7 -> 2.1 % of the run in `perf`, projections 105.0 -> 106.9
// GFLOP/s at chunks of 256 rows; at 1,024 rows 110.0 and 109.6, within the noise).
//
// Kernel is the ISA's own, in its file's anonymous namespace (so each instantiation is that
// file's, compiled with its flags; the tiles carry the target attributes):
//   Element, kBlockColumns, kTileRows   the type of x and W; the block's columns; a tile's rows
//   x_stride                            elements from one row of x to the next
//   pack_block(weight, begin, count)    packs W's rows [begin, begin + count) of the block
//   full_tile(x, y, out, columns)       kTileRows rows of x against the packed block
//   last_rows(x, rows, y, out, columns) 1 <= rows < kTileRows rows against it
#pragma once

#include <algorithm>
#include <cstdint>

#include "compute/cpu/prefetch_ahead.hpp"

namespace pf::cpu {

template <class Kernel>
void linear_by_blocks(Kernel& kernel, const typename Kernel::Element* x, int rows, int in,
                      const typename Kernel::Element* weight, int begin, int end, int out, float* y) {
  constexpr int kBlock = Kernel::kBlockColumns, kTile = Kernel::kTileRows;
  for (int b0 = begin; b0 < end; b0 += kBlock) {
    const int columns = std::min(kBlock, end - b0);
    kernel.pack_block(weight, b0, columns);
    const int next = std::min(kBlock, end - b0 - columns);
    PrefetchAhead ahead(weight + static_cast<int64_t>(b0 + columns) * in,
                        int64_t{sizeof(*weight)} * std::max(0, next) * in, rows / kTile);
    int r = 0;
    for (; r + kTile <= rows; r += kTile) {
      ahead.step();
      kernel.full_tile(x + r * kernel.x_stride, y + static_cast<int64_t>(r) * out + b0, out, columns);
    }
    if (r < rows)
      kernel.last_rows(x + r * kernel.x_stride, rows - r, y + static_cast<int64_t>(r) * out + b0, out, columns);
  }
}

}  // namespace pf::cpu
