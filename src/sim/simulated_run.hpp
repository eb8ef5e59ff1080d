// One simulated `run`: the plan `run` would make (fixed chunks, or dynamic ones from fits
// obtained as the run obtains them, on an emulated stage reading the cost model), the
// schedule simulated over it (pipeline_sim.hpp) and the run's summary. `pipefill simulate`
// prints one; `pipefill advise` (layout_search.hpp) ranks thousands.
#pragma once

#include <string>
#include <vector>

#include "sched/batch_plan.hpp"
#include "sched/chunking_options.hpp"
#include "sim/pipeline_sim.hpp"
#include "sim/stage_costs.hpp"
#include "trace/summary.hpp"

namespace pf::sim {

struct SimulatedRunSpec {
  int pp = 1, cp = 1, tp = 1;
  int hidden_size = 0;
  sched::ChunkingOptions chunking;  // chunking.stages is set from pp
  std::vector<int64_t> lengths;
  std::vector<int64_t> cached_tokens;  // one per prompt (prefix reuse), or empty
  // Or the batch's own prefix reuse, as `run` plans it (sched::find_shared_prefixes): its
  // order and each prompt's reused prefix. Empty: cached_tokens.
  sched::PrefixPlan prefixes;
  int ring_depth = 4;
  int wire_bytes = 4;
  std::vector<LinkSpec> links;  // links[s]: stage s -> s + 1
  bool scores = false;          // per-token scores (SimSetup::scores, score_from)
  std::vector<int64_t> score_from;
};

struct SimulatedRun {
  sched::BatchPlan plan;
  SimResult result;
  trace::RunSummary summary;
  std::string policy_used;  // fixed, or the dynamic policy's name
  std::string note;         // why dynamic chunking fell back to fixed chunks, if it did
};

// The summary's model_flops is left 0: a caller that prints it counts them (sched::plan_flops).
SimulatedRun simulate_run(const SimulatedRunSpec& spec, const std::vector<StageCost>& costs);

}  // namespace pf::sim
