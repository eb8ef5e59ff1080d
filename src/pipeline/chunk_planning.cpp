// Plan decision: profile (or load) -> fit -> policy -> plan -> broadcast.
#include "pipeline/chunk_planning.hpp"

#include <cstdio>
#include <cstdlib>

#include "dist/collectives.hpp"
#include "dist/root_decision.hpp"
#include "dist/steady_clock.hpp"
#include "errors.hpp"
#include "pipeline/progress.hpp"
#include "pipeline/stage_profiler.hpp"
#include "sched/context_split.hpp"
#include "sched/dynamic_chunker.hpp"

namespace pf::pipeline {

// Why the check: smaller chunks run the GEMMs less efficiently, and the models know it (a run
// once took 37 % longer on dynamic chunks the models had predicted slower).
std::string keep_the_faster_plan(sched::BatchPlan& plan, const sched::ChunkingOptions& o,
                                 const std::vector<sched::StageCostFit>& fits,
                                 const std::vector<int64_t>& prompt_lengths, const std::vector<char>& done,
                                 const sched::PrefixPlan& fixed_prefixes, std::string& policy_used) {
  const std::vector<sched::ChunkCostModel> models = stage_models(fits, o.stages);
  if (models.empty() || plan.micro_batches.empty()) return "";  // nothing to compare (a resume with all done)
  sched::BatchPlan fixed =
      sched::make_plan(prompt_lengths, sched::FixedChunkPolicy(o.initial_chunk), done, fixed_prefixes);
  const double dynamic_s = predicted_seconds(plan, models), fixed_s = predicted_seconds(fixed, models);
  char figures[200];
  std::snprintf(figures, sizeof figures,
                "predicted %.4g s for the pipefill policy's %zu chunks, %.4g s for %zu fixed chunks of %d", dynamic_s,
                plan.micro_batches.size(), fixed_s, fixed.micro_batches.size(), o.initial_chunk);
  // Within the models' own error (a few per cent) the policy's plan stands.
  constexpr double kMargin = 0.98;
  if (fixed_s < kMargin * dynamic_s) {
    plan = std::move(fixed);
    policy_used = "fixed";
    return std::string("fixed chunks kept: ") + figures;
  }
  return std::string("pipefill policy kept: ") + figures;
}

dist::RootOnly<std::vector<sched::StageCostFit>> profile_stages(const dist::Topology& topo,
                                                                compute::StageCompute& compute, int hidden_size,
                                                                int initial_chunk, int points, bool all_stages,
                                                                bool fresh, bool prefixed, bool report_progress) {
  std::string mine;  // this stage's fit as JSON (its TP rank 0), else empty
  if (all_stages || topo.first_stage()) {
    ProfileGrid grid{initial_chunk, points, compute.capacity_tokens(), {}};
    // Rank 0 says how far its own stage is (the others time theirs alongside), every few
    // seconds: a profile takes minutes on a large model.
    const double start = dist::steady_seconds();
    double last = start;
    if (report_progress && topo.is_writer())
      grid.progress = [&](const char* what, int done, int total) {
        const double now = dist::steady_seconds();
        if (done < total && now - last < 5) return;
        last = now;
        std::printf("profiling: stage 0 timed %d of %d %s (%.0f s)%s\n", done, total, what, now - start,
                    all_stages && topo.pp > 1 ? ", every stage its own" : "");
        std::fflush(stdout);
      };
    const GroupMax group_max = [&](double local) {
      double result = local;
      MPI_Request request;
      // (Over the stage's ranks: its TP group, and with CP every CP rank's, which compute
      // their shares of each profiled chunk together.)
      MPI_CHECK(MPI_Iallreduce(&local, &result, 1, MPI_DOUBLE, MPI_MAX, topo.stage_comm, &request));
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
      mine = to_json(fit).dump();
    }
  }
  const dist::RootOnly<std::vector<std::string>> texts = dist::gather_on_root(MPI_COMM_WORLD, mine);
  if (!texts.here()) return {};
  std::vector<sched::StageCostFit> fits;
  for (const std::string& text : *texts)
    if (!text.empty()) fits.push_back(sched::stage_fit_from_json(nlohmann::json::parse(text)));
  return dist::RootOnly<std::vector<sched::StageCostFit>>::on_root(std::move(fits));
}

PlanDecision decide_plan(const dist::Topology& topo, const sched::ChunkingOptions& o,
                         const std::vector<int64_t>& prompt_lengths, compute::StageCompute& compute, int hidden_size,
                         const std::optional<sched::CostProfile>& saved, const std::vector<char>& done,
                         const sched::PrefixPlan& prefixes, bool report_progress) {
  PlanDecision decision;
  // Profile unless a saved profile was loaded (rank 0 decides; every rank must agree).
  int must_profile = o.dynamic() && !(topo.is_writer() && saved) ? 1 : 0;
  dist::broadcast_int(must_profile, 0, MPI_COMM_WORLD);
  if (must_profile) {
    const bool fresh = o.cost_form == sched::CostForm::kFreshQuadratic;
    decision.fits = profile_stages(topo, compute, hidden_size, o.initial_chunk, o.profile_points, o.all_stages, fresh,
                                   !fresh, report_progress);
  } else if (topo.is_writer()) {
    decision.fits = dist::RootOnly<std::vector<sched::StageCostFit>>::on_root(
        saved ? saved->stages : std::vector<sched::StageCostFit>());
  }
  // Rank 0: the policy (dynamic from the fits, or fixed when they fail), then the plan.
  const std::string plan_bytes = dist::decide_on_root(MPI_COMM_WORLD, [&] {
    std::unique_ptr<sched::ChunkPolicy> policy;
    if (o.dynamic()) {
      std::string problem;
      policy = sched::make_dynamic_policy(o, *decision.fits, problem);
      if (policy) {
        decision.policy_used = sched::policy_name(o.policy);
      } else {
        decision.note = "dynamic chunking disabled, using fixed chunks of " + std::to_string(o.initial_chunk) + " (" +
                        problem + ")";
        std::fprintf(stderr, "warning: %s\n", decision.note.c_str());
      }
    }
    if (!policy) {
      policy = std::make_unique<sched::FixedChunkPolicy>(o.initial_chunk);
      decision.policy_used = "fixed";
    }
    // With CP a reuse inside the batch starts on the source's chunk boundaries: those of the
    // policy settled on (a dynamic policy that fell back to fixed chunks keeps its reuse).
    const auto aligned = [&](bool dynamic) {
      sched::PrefixPlan plan_prefixes = prefixes;
      if (topo.cp > 1) sched::align_reuse_to_chunks(plan_prefixes, o.initial_chunk, dynamic);
      return plan_prefixes;
    };
    const bool dynamic = decision.policy_used != "fixed";
    sched::BatchPlan plan = sched::make_plan(prompt_lengths, *policy, done, aligned(dynamic));
    if (o.policy == sched::ChunkPolicyKind::kPipefill && dynamic) {
      decision.note =
          keep_the_faster_plan(plan, o, *decision.fits, prompt_lengths, done, aligned(false), decision.policy_used);
      if (!decision.note.empty() && report_progress) std::fprintf(stderr, "note: %s\n", decision.note.c_str());
    }
    const std::vector<char> bytes = sched::serialize(plan);
    return std::string(bytes.begin(), bytes.end());
  });
  decision.plan = sched::deserialize(std::vector<char>(plan_bytes.begin(), plan_bytes.end()));
  const nlohmann::json why = nlohmann::json::parse(dist::decide_on_root(MPI_COMM_WORLD, [&] {
    return nlohmann::json{{"policy_used", decision.policy_used}, {"note", decision.note}}.dump();
  }));
  decision.policy_used = why["policy_used"].get<std::string>();
  decision.note = why["note"].get<std::string>();
  return decision;
}

}  // namespace pf::pipeline
