// A hardware description fitted to a measured `pipefill profile`: the rates its chunk cost
// models imply for the model's FLOPs, so that the analytic model (stage_costs.hpp) re-splits
// the measured machine over any pp x cp x tp, which a profile of one layout cannot. The
// links, memory and device count stay the base file's.
#pragma once

#include <string>

#include "model/model_shape.hpp"
#include "sched/cost_profile.hpp"
#include "sim/hardware.hpp"

namespace pf::sim {

// From each stage's fit t(L, x) = c + gamma L + b x + a (2 L x + x^2) (the prefix form, else
// the fresh-prompt one) over its layers' FLOPs, pooled over stages:
//   attention_efficiency = (sum of the layers' attention FLOP coefficients) / (peak x a)
//   matmul_efficiency    = (their matmul FLOPs a token) / (peak x (b - a))
//   matmul_half_rows     = c / (the per-row cost of a chunk's GEMMs' tiles), the fixed part
// The profile must be of one rank a stage (tp 1, cp 1): TP's all-reduces would be counted
// as compute. UserError otherwise, or when a stage's fit is not usable.
HardwareSpec hardware_from_profile(const HardwareSpec& base, const model::ModelShape& shape,
                                   const sched::CostProfile& profile, const std::string& path);

// What a profile's identity says of the layout and machine it measured, as advise and simulate
// read it (a hand-edited identity is an error, not a crash): a whole-number key such as "tp"
// (absent: 1); and that `hw` describes the same kind of machine (cpu ranks or GPUs).
int profiled_count(const sched::CostProfile& profile, const char* key, const std::string& path);
void require_profiled_machine(const sched::CostProfile& profile, const HardwareSpec& hw, const std::string& path);

}  // namespace pf::sim
