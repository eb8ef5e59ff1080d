// Deciding the batch plan: fixed chunks, or dynamic chunks from cost models that are
// loaded from a saved profile or measured now on the stages themselves. Collective: every
// rank calls it, rank 0 decides and broadcasts the plan, so a profiling failure on any stage
// becomes one warning on rank 0 and a fixed-chunk plan on every rank, never a hang.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "compute/stage_compute.hpp"
#include "dist/root_decision.hpp"
#include "dist/topology.hpp"
#include "sched/batch_plan.hpp"
#include "sched/chunking_options.hpp"
#include "sched/cost_profile.hpp"

namespace pf::pipeline {

// Decided on rank 0, known on every rank but `fits`.
struct PlanDecision {
  sched::BatchPlan plan;
  std::string policy_used;  // "fixed", "sglang" or "pipefill"; "fixed" also after a failed profile
  std::string note;         // why dynamic chunking was turned off, if it was
  // The stage fits the plan was decided from (profiled now or loaded; empty for fixed
  // chunks). The progress reporter predicts the run's time from them.
  dist::RootOnly<std::vector<sched::StageCostFit>> fits;
};

// Collective over MPI_COMM_WORLD: when profiling is needed, each profiled stage times its
// own layers (TP-collective) and fits; the fits gather on rank 0. `report_progress`: rank 0
// prints how far its stage is every few seconds.
dist::RootOnly<std::vector<sched::StageCostFit>> profile_stages(const dist::Topology& topology,
                                                                compute::StageCompute& compute, int hidden_size,
                                                                int initial_chunk, int points, bool all_stages,
                                                                bool fresh, bool prefixed,
                                                                bool report_progress = false);

// The pipefill policy's plan against fixed chunks of C0 over the same batch, by the stages'
// cost models (`fits`): the fixed plan replaces it (and policy_used becomes "fixed") when
// predicted more than 2 % faster. Returns the note saying which was kept and why ("" when
// there is nothing to compare). What `run` decides, and what `plan` and `simulate` show.
std::string keep_the_faster_plan(sched::BatchPlan& plan, const sched::ChunkingOptions& options,
                                 const std::vector<sched::StageCostFit>& fits,
                                 const std::vector<int64_t>& prompt_lengths, const std::vector<char>& done,
                                 const sched::PrefixPlan& fixed_prefixes, std::string& policy_used);

// Collective. `saved` is the loaded --cost-model and `prefixes` the order and reused prefixes
// of prefix reuse (both rank 0 only), `done` the run's resume state (the prompts it skips;
// read on rank 0). The plan is valid on all ranks.
PlanDecision decide_plan(const dist::Topology& topology, const sched::ChunkingOptions& options,
                         const std::vector<int64_t>& prompt_lengths, compute::StageCompute& compute, int hidden_size,
                         const std::optional<sched::CostProfile>& saved, const std::vector<char>& done = {},
                         const sched::PrefixPlan& prefixes = {}, bool report_progress = false);

}  // namespace pf::pipeline
