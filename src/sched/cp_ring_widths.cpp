// CP ring widths from a model's shape.
#include "sched/cp_ring_widths.hpp"

#include <algorithm>

namespace pf::sched {

CpWidths cp_ring_widths(const model::ModelShape& shape, int tp, bool cuda) {
  const int heads = shape.num_heads / tp, kv_heads = std::max(1, shape.num_kv_heads / tp);
  if (!shape.mla()) return CpWidths::grouped_query(heads, kv_heads, shape.head_dim, cuda ? 2 : 4);
  if (cuda) return CpWidths::absorbed_latent(heads, shape.latent_width(), shape.kv_lora_rank);
  return CpWidths::latent(heads, shape.latent_width(), shape.head_dim, shape.v_head_dim);
}

}  // namespace pf::sched
