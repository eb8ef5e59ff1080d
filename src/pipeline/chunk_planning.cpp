// Plan decision: profile (or load) -> fit -> policy -> plan -> broadcast.
#include "pipeline/chunk_planning.hpp"

#include <cstdio>
#include <cstdlib>

#include "dist/collectives.hpp"
#include "errors.hpp"
#include "pipeline/stage_profiler.hpp"
#include "sched/dynamic_chunker.hpp"

namespace pf::pipeline {

std::vector<sched::StageCostFit> profile_stages(const dist::Topology& topo, compute::CpuStageCompute& compute,
                                                kv::PagedKvPool& pool, int hidden_size, int initial_chunk,
                                                int points, bool all_stages, bool fresh, bool prefixed) {
  std::vector<char> mine;
  if (all_stages || topo.first_stage()) {
    const ProfileGrid grid{initial_chunk, points,
                           static_cast<int64_t>(pool.num_pages()) * pool.shape().page_size};
    const compute::AllReduce all_reduce = [&](float* data, int count) {
      dist::allreduce_sum(data, count, topo.tp_comm);
    };
    const GroupMax group_max = [&](double local) {
      double result = local;
      MPI_Request request;
      MPI_CHECK(MPI_Iallreduce(&local, &result, 1, MPI_DOUBLE, MPI_MAX, topo.tp_comm, &request));
      dist::wait_polling(&request);
      return result;
    };
    std::vector<sched::ChunkSample> fresh_samples, prefixed_samples;
    if (fresh) fresh_samples = profile_fresh_prompts(compute, pool, all_reduce, group_max, grid, hidden_size);
    if (prefixed) prefixed_samples = profile_prefixed_chunks(compute, pool, all_reduce, group_max, grid, hidden_size);
    if (topo.tp_rank == 0) {
      sched::StageCostFit fit = sched::fit_stage(topo.stage, fresh_samples, prefixed_samples);
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
                         const std::vector<int64_t>& prompt_lengths, compute::CpuStageCompute& compute,
                         kv::PagedKvPool& pool, int hidden_size, const std::optional<sched::CostProfile>& saved) {
  PlanDecision decision;
  std::vector<sched::StageCostFit> fits;
  if (o.dynamic() && o.cost_model_path.empty()) {
    const bool fresh = o.cost_form == sched::CostForm::kFreshQuadratic;
    fits = profile_stages(topo, compute, pool, hidden_size, o.initial_chunk, o.profile_points, o.all_stages, fresh,
                          !fresh);
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
    decision.plan = sched::make_plan(prompt_lengths, *policy);
    bytes = sched::serialize(decision.plan);
  }
  dist::broadcast_bytes(bytes, 0, MPI_COMM_WORLD);
  decision.plan = sched::deserialize(bytes);
  return decision;
}

}  // namespace pf::pipeline
