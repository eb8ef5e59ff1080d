// FLOP sum over a plan (see plan_flops.hpp).
#include "sched/plan_flops.hpp"

namespace pf::sched {

double plan_flops(const model::ModelShape& shape, const BatchPlan& plan) {
  double total = 0;
  for (const auto& mb : plan.micro_batches) {
    total += model::chunk_flops(shape, 0, shape.num_layers, mb.length, mb.start);
    if (mb.is_last) total += shape.lm_head_flops();
  }
  return total;
}

}  // namespace pf::sched
