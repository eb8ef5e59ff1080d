// FLOP counts of prefill, for achieved-rate figures (summary, benchmarks), from the model's
// shape (sim/model_shape.hpp): matmuls (projections, MLP or experts) and attention (each
// query against the keys it sees); norms, RoPE and activations are left out.
#pragma once

#include <cstdint>

#include "sched/batch_plan.hpp"
#include "sim/model_shape.hpp"

namespace pf::compute {

// Layers [first, first + count) on a chunk of `tokens` after `pos0` tokens, whole model
// width (divide by tp for one rank's share).
double chunk_flops(const sim::ModelShape& shape, int first_layer, int layer_count, int tokens, int64_t pos0);

// Every layer on every chunk of the plan, plus the LM head on each prompt's last position.
double plan_flops(const sim::ModelShape& shape, const sched::BatchPlan& plan);

}  // namespace pf::compute
