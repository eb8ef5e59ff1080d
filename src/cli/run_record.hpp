// What a run records about itself: the identities that --resume and saved cost profiles are
// matched on, and the output file's attributes. Each is the options' own part (generated from
// the option table, options.hpp) plus the keys the options do not decide, added here.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "cli/options.hpp"
#include "dist/topology.hpp"
#include "io/prompts_h5.hpp"
#include "pipeline/chunk_planning.hpp"
#include "pipeline/rank_setup.hpp"

namespace pf::cli {

// What an output must match to be resumed or accepted as done: model (config and weights),
// input, configuration. Rank 0 (it alone holds the weights' fingerprint and the prompts).
nlohmann::json run_identity(const RunOptions& options, const pipeline::RankModel& rank_model,
                            const io::PromptSet& prompts);

// What a cost profile must match to be reused: model, pp, tp, partition, backend.
nlohmann::json placement_identity(const PlacementOptions& options, const dist::Topology& topology,
                                  const pipeline::RankModel& rank_model);

// The output's attributes: the echoed configuration and what the run resolved it to.
nlohmann::json output_attributes(const RunOptions& options, const pipeline::RankModel& rank_model,
                                 const pipeline::PlanDecision& decision, const std::string& backend_used,
                                 double wall_s);

}  // namespace pf::cli
