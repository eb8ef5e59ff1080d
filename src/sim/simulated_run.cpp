// One simulated run (see simulated_run.hpp).
#include "sim/simulated_run.hpp"

#include <algorithm>
#include <memory>

#include "compute/emulate/emulated_stage_compute.hpp"
#include "pipeline/chunk_planning.hpp"
#include "pipeline/stage_profiler.hpp"
#include "sched/cost_profile.hpp"
#include "sched/dynamic_chunker.hpp"

namespace pf::sim {
namespace {

// The plan `run` would make: fixed, or dynamic from fits obtained as the run would obtain them.
sched::BatchPlan plan_for(const SimulatedRunSpec& spec, const std::vector<StageCost>& costs, std::string& policy_used,
                          std::string& note) {
  sched::ChunkingOptions c = spec.chunking;
  c.stages = spec.pp;
  std::unique_ptr<sched::ChunkPolicy> policy;
  std::vector<sched::StageCostFit> fits;
  if (c.dynamic()) {
    if (c.cost_source.profile_file()) {
      fits = sched::load_cost_profile(c.cost_source.value).stages;
    } else {
      const pipeline::ProfileGrid grid{
          c.initial_chunk, c.profile_points, pipeline::profile_capacity_tokens(spec.lengths, c.initial_chunk), {}};
      const bool fresh = c.cost_form == sched::CostForm::kFreshQuadratic;
      for (int s = 0; s < static_cast<int>(costs.size()); ++s) {
        if (!c.all_stages && s > 0) break;
        compute::EmulatedStageCompute stage(costs[s], 0, grid.max_tokens);
        fits.push_back(pipeline::profile_and_fit(
            s, stage, [](double x) { return x; }, grid, spec.hidden_size, fresh, !fresh));
      }
    }
    std::string problem;
    policy = sched::make_dynamic_policy(c, fits, problem);
    if (!policy) note = "dynamic chunking disabled (" + problem + ")";
  }
  policy_used = policy ? sched::policy_name(c.policy) : "fixed";
  if (!policy) policy = std::make_unique<sched::FixedChunkPolicy>(c.initial_chunk);
  const std::vector<int64_t> cached =
      spec.cached_tokens.empty() ? std::vector<int64_t>(spec.lengths.size(), 0) : spec.cached_tokens;
  const bool shared = !spec.prefixes.order.empty() || !spec.prefixes.reuse.empty();
  const sched::PrefixPlan prefixes = shared ? spec.prefixes : sched::PrefixPlan::from_outside(cached);
  sched::BatchPlan plan =
      sched::make_plan(spec.lengths, *policy, {}, prefixes, sched::kStudyStageChunks / std::max(1, spec.pp));
  // The pipefill policy's plan only where it beats fixed chunks, as run decides.
  if (c.policy == sched::ChunkPolicyKind::kPipefill && policy_used != "fixed")
    note = pipeline::keep_the_faster_plan(plan, c, fits, spec.lengths, {}, prefixes, policy_used);
  return plan;
}

}  // namespace

SimulatedRun simulate_run(const SimulatedRunSpec& spec, const std::vector<StageCost>& costs) {
  SimulatedRun run;
  run.plan = plan_for(spec, costs, run.policy_used, run.note);
  const SimSetup setup{spec.tp,         spec.cp,    spec.ring_depth, spec.hidden_size,
                       spec.wire_bytes, spec.links, spec.scores,     spec.score_from};
  run.result = simulate_pipeline(run.plan, costs, setup);
  run.summary = trace::summarize(run.plan, run.result.events, spec.pp, 1, run.result.makespan_s, 0.0);
  return run;
}

}  // namespace pf::sim
