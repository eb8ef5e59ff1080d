// Discrete-event simulation of exactly the schedule pipeline/stage_loop.cpp executes, with
// no MPI: the same plan, the same ring depth (receives posted `depth` micro-batches ahead,
// at most `depth` sends in flight, the oldest committed when the ring is full), sends on a
// link model (one transfer at a time per stage boundary, starting when both sides are
// ready), compute times from the stage cost models. Each TP group moves as one unit.
#pragma once

#include <vector>

#include "dist/activation_wire.hpp"
#include "sched/batch_plan.hpp"
#include "sim/hardware.hpp"
#include "sim/stage_costs.hpp"
#include "trace/timeline.hpp"

namespace pf::sim {

struct SimSetup {
  int tp = 1;
  int cp = 1;  // CP ranks a stage: each sends its share of a micro-batch's tokens on its own link
  int ring_depth = 4;
  int hidden_size = 0;
  int activation_bytes = dist::kActivationWireBytes;
  std::vector<LinkSpec> links;  // links[s]: stage s -> s + 1
  // Per-token scores (run --logprobs, --top-k, --token-ids, spans): the last stage runs the
  // LM head on every row of every micro-batch from each prompt's score_from[p] (its first
  // scored row, io::PromptSet::first_scored_row; empty: 0), not on a prompt's last row only.
  bool scores = false;
  std::vector<int64_t> score_from;
};

struct SimResult {
  std::vector<trace::TimelineEvent> events;  // one track per stage (its CP rank 0, TP rank 0)
  std::vector<double> ttft_s;                // per prompt: its LM head done on the last stage
  double makespan_s = 0;
  std::vector<double> boundary_bytes;  // bytes over each stage boundary, all CP and TP ranks together
};

SimResult simulate_pipeline(const sched::BatchPlan& plan, const std::vector<StageCost>& stages, const SimSetup& setup);

}  // namespace pf::sim
