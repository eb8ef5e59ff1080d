// A saved cost profile (`pipefill profile --out cost.json`, `run --cost-model cost.json`):
// the fitted models of every stage together with what they belong to (model, parallel
// layout, backend, hardware), so a sweep profiles once and a profile is never applied to a
// configuration it was not measured on.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/layer_partition.hpp"
#include "sched/cost_model.hpp"

namespace pf::sched {

struct StageCostFit {
  int stage = 0;
  FitResult sglang;  // fit of fresh prompts (kFreshQuadratic)
  FitResult prefix;  // fit of prefixed chunks (kPrefixAware)
  int fresh_points = 0;
  int prefixed_points = 0;           // used for the fit
  int heldout_points = 0;            // prefixed chunks kept out of both fits
  double sglang_heldout_error = -1;  // mean relative error on the held-out chunks, -1: none
  double prefix_heldout_error = -1;

  const FitResult& fit(CostForm form) const { return form == CostForm::kFreshQuadratic ? sglang : prefix; }
};

nlohmann::json to_json(const StageCostFit& fit);
StageCostFit stage_fit_from_json(const nlohmann::json& json);

// A prefix fit whose mean relative error on the held-out chunks exceeds this is not used.
constexpr double kMaxHeldoutError = 0.2;
// Appended to a failed fit's problem: what a user can change to get a usable one.
constexpr const char* kFitAdvice =
    "; to fix: more points (--profile-points 32 or more), a longer prefix (`pipefill profile --max-prefix` up to "
    "your longest prompt) or a larger --chunk-size, timed on an otherwise idle machine";

// Every prefixed sample whose index % 4 == 3 is held out; the rest fit the prefix model.
// The SGLang model fits all fresh samples. Both are scored on the held-out chunks; a prefix
// fit that misses them by more than kMaxHeldoutError is marked not ok, and every failed fit's
// problem ends with kFitAdvice.
StageCostFit fit_stage(int stage, const std::vector<ChunkSample>& fresh, const std::vector<ChunkSample>& prefixed);

struct CostProfile {
  nlohmann::json identity;  // model config, pp, tp, layer partition, backend (must match a run)
  nlohmann::json hardware;  // host, cpu, cores (a mismatch is only a warning)
  int initial_chunk = 0;
  std::vector<StageCostFit> stages;

  // The layer partition its stages were timed on ("15,15"; empty when the identity has none).
  std::string layer_partition() const {
    const auto found = identity.find("layer_partition");
    return found != identity.end() && found->is_string() ? found->get<std::string>() : std::string();
  }
};

nlohmann::json to_json(const CostProfile& profile);
// Throws UserError if the file is unreadable or malformed, or cannot be a profile: a fit
// marked ok whose coefficients break check_coefficients, stages other than 0..N-1 once
// each, or N different from the pp its identity names.
CostProfile load_cost_profile(const std::string& path);

// The layers its `pp` stages were timed on, for a model of `num_layers`: identity's
// layer_partition, or SGLang's default when it has none; UserError naming `path` when it is
// not a split of those layers into those stages.
std::vector<model::StageRange> profiled_partition(const CostProfile& profile, int num_layers, int pp,
                                                  const std::string& path);
void save_cost_profile(const std::string& path, const CostProfile& profile);

// This machine, for CostProfile::hardware.
nlohmann::json describe_hardware();

// UserError naming the first field of `identity` that differs from the profile's; when
// `identity` names pp, also check_profile_stages against it.
void check_profile_matches(const CostProfile& profile, const nlohmann::json& identity, const std::string& path);

// UserError unless the profile holds one fit for each of the pp stages of this run.
void check_profile_stages(const CostProfile& profile, int pp, const std::string& path);

// UserError unless `model` can be a chunk's cost: a > 0 and b, c, gamma >= 0, all finite
// (what every fit marked ok satisfies; the dynamic chunker's solve relies on it). `what`
// names the model in the message: "<what> has a = -3e-09: a cost model needs ...".
void check_coefficients(const ChunkCostModel& model, const std::string& what);

}  // namespace pf::sched
