// Plan decision: profile (or load) -> fit -> policy -> plan -> broadcast.
#include "pipeline/chunk_planning.hpp"

#include <cstdio>
#include <cstdlib>

#include "dist/collectives.hpp"
#include "errors.hpp"
#include "pipeline/stage_profiler.hpp"
#include "sched/dynamic_chunker.hpp"

namespace pf::pipeline {

std::vector<sched::StageCostFit> profile_stages(const dist::Topology& topo, compute::StageCompute& compute,
                                                int hidden_size, int initial_chunk, int points, bool all_stages,
                                                bool fresh, bool prefixed) {
  std::vector<char> mine;
  if (all_stages || topo.first_stage()) {
    const ProfileGrid grid{initial_chunk, points, compute.capacity_tokens()};
    const GroupMax group_max = [&](double local) {
      double result = local;
      MPI_Request request;
      MPI_CHECK(MPI_Iallreduce(&local, &result, 1, MPI_DOUBLE, MPI_MAX, topo.tp_comm, &request));
      dist::wait_polling(&request);
      return result;
    };
    sched::StageCostFit fit = profile_and_fit(topo.stage, compute, group_max, grid, hidden_size, fresh, prefixed);
    if (topo.tp_rank == 0) {
      // Test hook: make this stage's fit fail, to prove the failure reaches every rank.
      if (const char* failing = std::getenv("PIPEFILL_TEST_FAIL_PROFILE_STAGE");
          failing && std::atoi(failing) == topo.stage) {
        fit.sglang.ok = fit.prefix.ok = false;
        fit.sglang.problem = fit.prefix.problem = "failure injected by PIPEFILL_TEST_FAIL_PROFILE_STAGE";
      }
      const std::string text = to_json(fit).dump();
      mine.assign(text.begin(), text.end());
    }
  }
  std::vector<sched::StageCostFit> fits;
  for (const auto& blob : dist::gather_bytes(mine, 0, MPI_COMM_WORLD))
    if (!blob.empty()) fits.push_back(sched::stage_fit_from_json(nlohmann::json::parse(blob.begin(), blob.end())));
  return fits;
}

PlanDecision decide_plan(const dist::Topology& topo, const sched::ChunkingOptions& o,
                         const std::vector<int64_t>& prompt_lengths, compute::StageCompute& compute,
                         int hidden_size, const std::optional<sched::CostProfile>& saved,
                         const std::vector<char>& done, const sched::PrefixPlan& prefixes) {
  PlanDecision decision;
  std::vector<sched::StageCostFit> fits;
  // Profile unless a saved profile was loaded (rank 0 decides; every rank must agree).
  int must_profile = o.dynamic() && !(topo.is_writer() && saved) ? 1 : 0;
  dist::broadcast_int(must_profile, 0, MPI_COMM_WORLD);
  if (must_profile) {
    const bool fresh = o.cost_form == sched::CostForm::kFreshQuadratic;
    fits = profile_stages(topo, compute, hidden_size, o.initial_chunk, o.profile_points, o.all_stages, fresh, !fresh);
  } else if (saved) {
    fits = saved->stages;
  }
  std::vector<char> bytes;
  if (topo.is_writer()) {
    std::unique_ptr<sched::ChunkPolicy> policy;
    if (o.dynamic()) {
      std::string problem;
      policy = sched::make_dynamic_policy(o, fits, problem);
      if (policy) {
        decision.policy_used = sched::policy_name(o.policy);
      } else {
        decision.note = "dynamic chunking disabled, using fixed chunks of " + std::to_string(o.initial_chunk) +
                        " (" + problem + ")";
        std::fprintf(stderr, "warning: %s\n", decision.note.c_str());
      }
    }
    if (!policy) {
      policy = std::make_unique<sched::FixedChunkPolicy>(o.initial_chunk);
      decision.policy_used = "fixed";
    }
    decision.plan = sched::make_plan(prompt_lengths, *policy, done, prefixes);
    bytes = sched::serialize(decision.plan);
  }
  dist::broadcast_bytes(bytes, 0, MPI_COMM_WORLD);
  decision.plan = sched::deserialize(bytes);
  if (topo.is_writer()) decision.fits = std::move(fits);
  return decision;
}

}  // namespace pf::pipeline
