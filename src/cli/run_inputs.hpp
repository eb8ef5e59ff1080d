// Rank 0's part of starting a run, before anything is computed: the paths checked, the input
// read and validated, a saved cost profile loaded, the KV capacity checked, the profile
// matched, the output opened. Each throws UserError; run_prepare.cpp runs them in checked
// steps, so every rank learns of a failure and no file is touched by a run that cannot start.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/options.hpp"
#include "dist/topology.hpp"
#include "io/prompts_h5.hpp"
#include "io/results_h5.hpp"
#include "pipeline/rank_setup.hpp"
#include "sched/cost_profile.hpp"

namespace pf::cli {

// Every path the run reads or writes, before anything is read, written or computed: outputs
// must be creatable files, and no two roles may be the same file.
void check_run_paths(const RunOptions& options);

// The prompts, validated against the model's vocabulary and context length.
io::PromptSet read_run_prompts(const RunOptions& options, const pipeline::RankModel& rank_model);
// Rank 0: the --token-ids set (empty without it), each id checked against the model's
// vocabulary and the rows' message size against the chunk (UserError).
std::vector<int32_t> read_token_set(const RunOptions& options, const pipeline::RankModel& rank_model);

// Every stage's KV pool holds the longest prompt, by the backend's own rule where the options
// alone decide it (pipeline::check_kv_capacity).
void check_kv_capacity(const RunOptions& options, const dist::Topology& topology, const pipeline::RankModel& rank_model,
                       const io::PromptSet& prompts);

// Collective: the ranks' largest forwards (a chunk, or dynamic chunking's profile of 1.25 C0
// when `profiles`) fit their node's memory (pipeline::check_forward_memory).
void check_forward_memory(const RunOptions& options, const dist::Topology& topology,
                          const pipeline::RankModel& rank_model, const std::vector<int64_t>& lengths, bool profiles);

// How many positions of each prompt run the LM head on the last stage: from the one before
// its first scored token to its end with --logprobs, --top-k or --token-ids; none without
// them (the last position's logits alone).
std::vector<int64_t> scored_positions(const RunOptions& options, const io::PromptSet& prompts);

// The profile --cost-model FILE names (nullopt without one): what a dynamic policy uses
// instead of profiling, or the emulator's costs. Then its check against the run's
// `placement_identity`, once the layer partition is known (the emulator matches its own
// profile, backend aside, as it is built).
std::optional<sched::CostProfile> load_saved_costs(const RunOptions& options);
void match_saved_costs(const RunOptions& options, const sched::CostProfile& profile,
                       const nlohmann::json& placement_identity);

// The output, created, or reopened with --resume; null when --resume finds it complete.
std::unique_ptr<io::ResultWriter> open_output(const RunOptions& options, const pipeline::RankModel& rank_model,
                                              const io::PromptSet& prompts);

}  // namespace pf::cli
