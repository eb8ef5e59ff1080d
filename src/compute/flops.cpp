// FLOP counting over a plan.
#include "compute/flops.hpp"

namespace pf::compute {

double chunk_flops(const sim::ModelShape& shape, int first_layer, int layer_count, int tokens, int64_t pos0) {
  double total = 0;
  for (int layer = first_layer; layer < first_layer + layer_count; ++layer)
    total += shape.matmul_flops(layer, tokens) + shape.attention_flops(static_cast<double>(pos0), tokens);
  return total;
}

double plan_flops(const sim::ModelShape& shape, const sched::BatchPlan& plan) {
  double total = 0;
  for (const auto& mb : plan.micro_batches) {
    total += chunk_flops(shape, 0, shape.num_layers, mb.length, mb.start);
    if (mb.is_last) total += shape.lm_head_flops();
  }
  return total;
}

}  // namespace pf::compute
