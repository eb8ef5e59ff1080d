// The attention kernel of attention_tiles.hpp for Avx2; attention.cpp calls it only where the
// CPU runs it. Everything from elsewhere is included first and compiled as the rest of the
// build; only the code after the pragma is compiled for avx2,fma, so no inline function
// shared with other files is ever emitted with its instructions.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "compute/cpu/attention.hpp"
#include "compute/cpu/attention_kernels.hpp"

#pragma GCC push_options
#pragma GCC target("avx2,fma")

#include "compute/cpu/attention_tiles.hpp"
#include "compute/cpu/simd_avx2.hpp"

namespace pf::cpu {

bool avx2_attention_fits(int head_dim) {
  return head_dim % 2 == 0;  // passes of Avx2::kValueColumns, then one of the even rest
}

void attend_query_block_avx2(const QueryBlock& block, TileScratch& scratch) {
  tiles::attend_query_block<Avx2>(block, scratch);
}

}  // namespace pf::cpu

#pragma GCC pop_options
