// `pipefill plan`: the chunk sizes a policy gives, one per line (or JSON), for tuning and tests.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "errors.hpp"
#include "pipeline/chunk_planning.hpp"
#include "sched/batch_plan.hpp"
#include "sched/dynamic_chunker.hpp"

namespace pf::cli {
namespace {

// The policy, and the stage fits it came from (a profile's, or --coefficients as stage 0's).
std::unique_ptr<sched::ChunkPolicy> policy_for(const PlanOptions& options, std::vector<sched::StageCostFit>& fits) {
  const auto& c = options.chunking;
  if (!c.dynamic()) return std::make_unique<sched::FixedChunkPolicy>(c.initial_chunk);
  if (!options.coefficients.empty()) {
    const auto& k = options.coefficients;
    sched::StageCostFit fit;
    sched::FitResult& chosen = k.size() == 2 ? fit.sglang : fit.prefix;
    chosen.ok = true;
    chosen.model = {k.size() == 2 ? sched::CostForm::kFreshQuadratic : sched::CostForm::kPrefixAware, k[0], k[1],
                    k.size() > 2 ? k[2] : 0.0, k.size() > 3 ? k[3] : 0.0};
    fits.push_back(fit);
    sched::ChunkingOptions single = c;
    single.cost_form = chosen.model.form;
    single.all_stages = false;
    std::string problem;
    auto policy = sched::make_dynamic_policy(single, fits, problem);
    if (!policy) throw UserError("--coefficients: " + problem);
    return policy;
  }
  fits = sched::load_cost_profile(c.cost_source.value).stages;
  if (static_cast<int>(fits.size()) != c.stages)  // (a profile's stages are 0..N-1, N its pp)
    throw UserError(c.cost_source.value + " was profiled with --pp " + std::to_string(fits.size()) +
                    ": plan its chunks with --pp " + std::to_string(fits.size()) + " (given " +
                    std::to_string(c.stages) + ")");
  std::string problem;
  auto policy = sched::make_dynamic_policy(c, fits, problem);
  if (policy) return policy;
  // What `pipefill run` does with the same profile: it says why, and runs fixed chunks.
  std::fprintf(stderr, "warning: dynamic chunking disabled, using fixed chunks of %d (%s cannot drive it: %s)\n",
               c.initial_chunk, c.cost_source.value.c_str(), problem.c_str());
  return std::make_unique<sched::FixedChunkPolicy>(c.initial_chunk);
}

}  // namespace

int plan_command(int argc, char** argv) {
  PlanOptions options;
  if (!parse_plan(argc, argv, options)) return 0;
  std::vector<sched::StageCostFit> fits;
  const auto policy = policy_for(options, fits);
  // The batch as `run` plans it (a dynamic policy cuts finer than its initial chunk: bounded).
  sched::BatchPlan plan = sched::make_plan(options.lengths, *policy, {}, {}, sched::kStudyStageChunks);
  std::string policy_used = options.chunking.dynamic() ? sched::policy_name(options.chunking.policy) : "fixed";
  if (options.chunking.policy == sched::ChunkPolicyKind::kPipefill &&
      dynamic_cast<const sched::DynamicChunkPolicy*>(policy.get())) {
    sched::ChunkingOptions chunking = options.chunking;
    if (!options.coefficients.empty()) chunking.all_stages = false;  // one stage: the coefficients
    const std::string note = pipeline::keep_the_faster_plan(plan, chunking, fits, options.lengths, {}, {}, policy_used);
    if (!note.empty()) std::fprintf(stderr, "note: %s\n", note.c_str());
  }
  std::vector<std::vector<int>> chunks(options.lengths.size());
  for (const sched::MicroBatch& mb : plan.micro_batches) chunks[mb.prompt].push_back(mb.length);
  nlohmann::json json = nlohmann::json::array();
  for (size_t p = 0; p < options.lengths.size(); ++p) {
    const int64_t length = options.lengths[p];
    const std::vector<int>& sizes = chunks[p];
    if (options.json) {
      json.push_back({{"length", length}, {"chunks", sizes}});
    } else {
      if (p > 0) std::printf("\n");  // a blank line between prompts
      for (int size : sizes) std::printf("%d\n", size);
    }
  }
  if (options.json) std::printf("%s\n", json.dump().c_str());
  return 0;
}

}  // namespace pf::cli
