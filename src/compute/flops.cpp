// FLOP counting.
#include "compute/flops.hpp"

#include "compute/cpu/attention.hpp"

namespace pf::compute {

double layer_chunk_flops(const model::ModelConfig& c, int heads, int kv_heads, int intermediate, int tokens,
                         int64_t pos0) {
  const double t = tokens, h = c.hidden_size, d = c.head_dim;
  const double linear = 2.0 * t * h * ((heads + 2.0 * kv_heads) * d + heads * d + 3.0 * intermediate);
  return linear + cpu::chunk_attention_flops(tokens, static_cast<int>(pos0), heads, c.head_dim);
}

double plan_flops(const model::ModelConfig& c, const sched::BatchPlan& plan) {
  double total = 0;
  for (const auto& mb : plan.micro_batches) {
    total += c.num_layers * layer_chunk_flops(c, c.num_heads, c.num_kv_heads, c.intermediate_size, mb.length, mb.start);
    if (mb.is_last) total += 2.0 * c.vocab_size * c.hidden_size;
  }
  return total;
}

}  // namespace pf::compute
