// The attention kernel of attention_tiles.hpp for Avx512 (this file alone is compiled for it;
// attention.cpp calls it only where the CPU runs it).
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
