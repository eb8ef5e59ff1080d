// Per-stage cost of a chunk, the common currency of the emulate backend and the simulator:
// a prefix-form chunk model t(L, x) (sched/cost_model.hpp) plus the LM head's time on a
// prompt's last chunk. From an analytic count (model shape x hardware) or from a profile.
#pragma once

#include <vector>

#include "model/layer_partition.hpp"
#include "model/model_shape.hpp"
#include "sched/cost_model.hpp"
#include "sched/cost_profile.hpp"
#include "dist/activation_wire.hpp"
#include "sim/hardware.hpp"

namespace pf::sim {

struct StageCost {
  sched::ChunkCostModel chunk;
  double lm_head_s = 0;  // last stage only
  double chunk_seconds(double prefix, double tokens) const { return chunk.chunk_time(prefix, tokens); }
};

// Matmuls at the fp8 rate when `fp8` (an FP8 checkpoint), attention at the bf16 rate; TP
// all-reduces (two per layer, ring) on the intra-node link when the TP group fits a node,
// `wire_bytes` per activation (pipefill sends float32; 2 models a bf16 sender).
std::vector<StageCost> analytic_stage_costs(const model::ModelShape& shape, const HardwareSpec& hw,
                                            const std::vector<model::StageRange>& partition, int tp, bool fp8,
                                            int wire_bytes = dist::kActivationWireBytes);

// Stage costs from a saved profile, in the chosen form (prefix-aware if every stage has it).
std::vector<StageCost> profiled_stage_costs(const sched::CostProfile& profile, int pp);

// The link between stage s and s + 1: across nodes when they sit on different nodes
// (block placement: stage s occupies devices [s tp, (s+1) tp)).
LinkSpec stage_link(const HardwareSpec& hw, int stage, int tp);

}  // namespace pf::sim
