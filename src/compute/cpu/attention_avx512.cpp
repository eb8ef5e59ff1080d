// The attention kernel of attention_tiles.hpp for Avx512; attention.cpp calls it only where the
// CPU runs it. Everything from elsewhere is included first and compiled as the rest of the
// build; only the code after the pragma is compiled for avx512f,avx2,fma, so no inline function
// shared with other files is ever emitted with its instructions.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "compute/cpu/attention.hpp"
#include "compute/cpu/attention_kernels.hpp"

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")

#include "compute/cpu/attention_tiles.hpp"
#include "compute/cpu/simd_avx512.hpp"

namespace pf::cpu {

bool avx512_attention_fits(int head_dim) {
  return head_dim % Avx512::kValueColumns == 0;
}

void attend_query_block_avx512(const QueryBlock& block, TileScratch& scratch) {
  tiles::attend_query_block<Avx512>(block, scratch);
}

}  // namespace pf::cpu

#pragma GCC pop_options
