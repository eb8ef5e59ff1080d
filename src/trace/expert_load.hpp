// How evenly the routers spread tokens over the experts in a run: rows routed to each expert
// of each MoE layer, counted by the backend, gathered to rank 0, and summed up in one line of
// the summary. It tells a user whether whole experts per TP rank (--expert-split experts)
// would leave ranks waiting for the busiest one (docs/choices.md).
#pragma once

#include <cstdint>
#include <cstdio>
#include <vector>

#include "dist/topology.hpp"
#include "model/layer_partition.hpp"

namespace pf::trace {

struct ExpertLoad {
  int experts = 0;
  int tp = 1;
  std::vector<std::vector<int64_t>> rows;  // per MoE layer: rows routed to each expert
  // Over the MoE layers, the mean of (the busiest expert's rows / the mean expert's), and the
  // busiest TP rank's rows / its even share if each rank held experts / tp whole experts.
  double max_over_mean() const;
  double busiest_rank_share() const;
};

// Collective. `mine`: this rank's counts, [local layers][experts] (StageCompute::expert_rows;
// empty for a dense model); stage s's first TP rank speaks for its stage (the group routes alike).
ExpertLoad gather_expert_load(const dist::Topology& topology, const std::vector<int64_t>& mine, int experts);

// "experts: ..." (nothing for a dense model or an empty load).
void print_expert_load(const ExpertLoad& load, std::FILE* out);

}  // namespace pf::trace
