// The FLOPs a plan computes, for achieved-rate figures (the run's summary, simulate): every
// layer on every chunk (model_shape.hpp's chunk_flops) plus the LM head on each prompt's
// last position.
#pragma once

#include "model/model_shape.hpp"
#include "sched/batch_plan.hpp"

namespace pf::sched {

double plan_flops(const model::ModelShape& shape, const BatchPlan& plan);

}  // namespace pf::sched
