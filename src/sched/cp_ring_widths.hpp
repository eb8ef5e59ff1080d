// What a CP ring moves per token and layer, from the model's shape alone: for the run's
// traffic report (the emulator runs no backend) and the simulator. Each backend's own
// cp_widths() makes the same choice from its loaded config; the report's "the chunks' sizes
// give" beside the bytes the ring measured checks them against each other (mpi.cp_kv_budget,
// sim.kv.cp_*).
#pragma once

#include "model/model_shape.hpp"
#include "sched/context_split.hpp"

namespace pf::sched {

// One TP rank's share: its query heads, its KV heads (whole on each rank when there are
// fewer than tp). cuda moves its bf16 cache and attends MLA absorbed; cpu moves float32 and
// attends MLA expanded.
CpWidths cp_ring_widths(const model::ModelShape& shape, int tp, bool cuda);

}  // namespace pf::sched
