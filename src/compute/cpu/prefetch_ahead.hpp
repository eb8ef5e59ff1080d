// The GEMMs' weights do not fit any cache: each block of output columns is packed from DRAM.
// Fetching the next block's weight rows into L2 a slice at a time, under the current block's
// tiles, lets its packing read L2 instead of waiting on DRAM (gemm_blocks.hpp has the
// measurement).
#pragma once

#include <algorithm>
#include <cstdint>

#if defined(PIPEFILL_X86_KERNELS)
#include <immintrin.h>
#endif

namespace pf::cpu {

class PrefetchAhead {
 public:
  // `bytes` from `begin` (0: nothing), over `steps` calls of step().
  PrefetchAhead(const void* begin, int64_t bytes, int64_t steps)
      : at_(static_cast<const char*>(begin)), lines_((bytes + 63) / 64), steps_(std::max<int64_t>(1, steps)) {}

  // The next slice: after the k-th call, k/steps of the lines have been asked for.
  void step() {
#if defined(PIPEFILL_X86_KERNELS)
    const int64_t until = lines_ * ++done_steps_ / steps_;
    for (; fetched_ < until; ++fetched_) _mm_prefetch(at_ + 64 * fetched_, _MM_HINT_T1);
#endif
  }

 private:
  const char* at_;
  int64_t lines_, steps_;
  int64_t done_steps_ = 0, fetched_ = 0;
};

}  // namespace pf::cpu
