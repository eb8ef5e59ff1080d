// Cost profile fitting per stage, JSON form, and the identity check.
#include "sched/cost_profile.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "errors.hpp"
#include "io/durable_file.hpp"
#include "io/file_checks.hpp"

namespace pf::sched {
namespace {

nlohmann::json fit_json(const FitResult& fit) {
  return {{"form", cost_form_name(fit.model.form)},
          {"ok", fit.ok},
          {"problem", fit.problem},
          {"a", fit.model.a},
          {"b", fit.model.b},
          {"c", fit.model.c},
          {"gamma", fit.model.gamma}};
}

FitResult fit_from_json(const nlohmann::json& j) {
  FitResult fit;
  fit.model.form = parse_cost_form(j.at("form").get<std::string>());
  fit.ok = j.at("ok").get<bool>();
  fit.problem = j.value("problem", "");
  fit.model.a = j.at("a").get<double>();
  fit.model.b = j.at("b").get<double>();
  fit.model.c = j.at("c").get<double>();
  fit.model.gamma = j.at("gamma").get<double>();
  return fit;
}

}  // namespace

nlohmann::json to_json(const StageCostFit& f) {
  return {{"stage", f.stage},
          {"sglang", fit_json(f.sglang)},
          {"prefix", fit_json(f.prefix)},
          {"fresh_points", f.fresh_points},
          {"prefixed_points", f.prefixed_points},
          {"heldout_points", f.heldout_points},
          {"sglang_heldout_error", f.sglang_heldout_error},
          {"prefix_heldout_error", f.prefix_heldout_error}};
}

StageCostFit stage_fit_from_json(const nlohmann::json& j) {
  StageCostFit f;
  f.stage = j.at("stage").get<int>();
  f.sglang = fit_from_json(j.at("sglang"));
  f.prefix = fit_from_json(j.at("prefix"));
  f.fresh_points = j.value("fresh_points", 0);
  f.prefixed_points = j.value("prefixed_points", 0);
  f.heldout_points = j.value("heldout_points", 0);
  f.sglang_heldout_error = j.value("sglang_heldout_error", -1.0);
  f.prefix_heldout_error = j.value("prefix_heldout_error", -1.0);
  return f;
}

StageCostFit fit_stage(int stage, const std::vector<ChunkSample>& fresh, const std::vector<ChunkSample>& prefixed) {
  StageCostFit f;
  f.stage = stage;
  std::vector<ChunkSample> train, heldout;
  for (size_t i = 0; i < prefixed.size(); ++i) (i % 4 == 3 ? heldout : train).push_back(prefixed[i]);
  f.sglang = fit_fresh_quadratic(fresh);
  f.prefix = fit_prefix_aware(train);
  if (fresh.empty()) f.sglang.problem = "not profiled";
  if (prefixed.empty()) f.prefix.problem = "not profiled";
  f.fresh_points = static_cast<int>(fresh.size());
  f.prefixed_points = static_cast<int>(train.size());
  f.heldout_points = static_cast<int>(heldout.size());
  if (!heldout.empty()) {
    if (f.sglang.ok) f.sglang_heldout_error = mean_relative_error(f.sglang.model, heldout);
    if (f.prefix.ok) f.prefix_heldout_error = mean_relative_error(f.prefix.model, heldout);
  }
  // A prefix fit that misses the chunks it did not see by this much plans chunks on noise.
  // (The SGLang fit is scored too but kept as SGLang keeps it: it never sees a prefix.)
  if (f.prefix.ok && f.prefix_heldout_error > kMaxHeldoutError) {
    char text[160];
    std::snprintf(text, sizeof text, "it misses the held-out chunks by %.1f%% on average (limit %.0f%%)",
                  100 * f.prefix_heldout_error, 100 * kMaxHeldoutError);
    f.prefix.ok = false;
    f.prefix.problem = text;
  }
  // Every failure says what would fix it, in every command that shows it (profile, plan, run).
  for (FitResult* fit : {&f.sglang, &f.prefix})
    if (!fit->ok && fit->problem != "not profiled") fit->problem += kFitAdvice;
  return f;
}

nlohmann::json to_json(const CostProfile& p) {
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& s : p.stages) stages.push_back(to_json(s));
  return {{"pipefill_version", PIPEFILL_VERSION},
          {"identity", p.identity},
          {"hardware", p.hardware},
          {"initial_chunk", p.initial_chunk},
          {"stages", stages}};
}

void check_coefficients(const ChunkCostModel& m, const std::string& what) {
  const std::pair<const char*, double> coefficients[] = {{"a", m.a}, {"b", m.b}, {"c", m.c}, {"gamma", m.gamma}};
  for (const auto& [name, value] : coefficients) {
    const bool is_a = name[0] == 'a';
    // At most an hour: a token's, a token pair's or a chunk's time beyond it is no machine's
    // (a hand-edited b = 1e300 once ranked a layout at time 0 and simulated 8e300 s).
    if (std::isfinite(value) && (is_a ? value > 0 : value >= 0) && value <= 3600) continue;
    std::ostringstream text;
    text << what << " has " << name << " = " << value
         << ": a cost model needs a > 0 and b, c, gamma >= 0, each at most 3600 seconds";
    throw UserError(text.str());
  }
}

namespace {

std::string stages_text(size_t count) {
  return std::to_string(count) + (count == 1 ? " stage" : " stages");
}

// A profile that cannot be one, whatever run it is used for (see load_cost_profile).
void check_profile(const CostProfile& p, const std::string& path) {
  if (p.initial_chunk < 1)
    throw UserError(path + ": initial_chunk is " + std::to_string(p.initial_chunk) + ", it must be at least 1");
  const int count = static_cast<int>(p.stages.size());
  if (count == 0) throw UserError(path + ": the stages array is empty; profile again with `pipefill profile`");
  std::vector<bool> seen(count, false);
  for (const auto& fit : p.stages) {
    if (fit.stage < 0 || fit.stage >= count || seen[fit.stage])
      throw UserError(path + ": " + (fit.stage >= 0 && fit.stage < count ? "a second entry for" : "an entry for") +
                      " stage " + std::to_string(fit.stage) + " (a profile of " + std::to_string(count) +
                      " stages holds stages 0.." + std::to_string(count - 1) + " once each)");
    seen[fit.stage] = true;
    const std::string stage = path + ": stage " + std::to_string(fit.stage) + "'s ";
    if (fit.sglang.ok) check_coefficients(fit.sglang.model, stage + "sglang fit");
    if (fit.prefix.ok) check_coefficients(fit.prefix.model, stage + "prefix fit");
  }
  const auto pp = p.identity.find("pp");
  if (pp != p.identity.end() && pp->is_number_integer() && pp->get<int>() != count)
    throw UserError(path + " has " + stages_text(count) + " but its identity says pp " +
                    std::to_string(pp->get<int>()) + "; profile again with `pipefill profile`");
}

}  // namespace

CostProfile load_cost_profile(const std::string& path) {
  io::require_regular_if_present(path, "--cost-model");  // a directory would read as an I/O fault
  std::ifstream in(path);
  if (!in) throw UserError("cannot read cost model " + path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw UserError(path + ": not a JSON cost profile");
  CostProfile p;
  try {
    p.identity = j.at("identity");
    p.hardware = j.value("hardware", nlohmann::json::object());
    p.initial_chunk = j.at("initial_chunk").get<int>();
    for (const auto& s : j.at("stages")) p.stages.push_back(stage_fit_from_json(s));
  } catch (const nlohmann::json::exception& e) {
    throw UserError(path + ": malformed cost profile (" + std::string(e.what()) + ")");
  }
  check_profile(p, path);
  return p;
}

void save_cost_profile(const std::string& path, const CostProfile& profile) {
  try {  // whole or not at all (a temporary renamed over the path)
    io::write_atomically(path, to_json(profile).dump(2) + "\n");
  } catch (const std::runtime_error& e) {
    throw UserError(e.what());
  }
}

nlohmann::json describe_hardware() {
  char host[256] = "?";
  gethostname(host, sizeof host);
  std::string cpu = "unknown";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);)
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  return {{"host", host}, {"cpu", cpu}, {"cores", std::thread::hardware_concurrency()}};
}

std::vector<model::StageRange> profiled_partition(const CostProfile& profile, int num_layers, int pp,
                                                  const std::string& path) {
  const std::string text = profile.layer_partition();
  try {
    return text.empty() ? model::default_partition(num_layers, pp) : model::parse_partition(text, num_layers, pp);
  } catch (const UserError&) {
    throw UserError(path + ": its layer_partition \"" + text.substr(0, 80) + (text.size() > 80 ? "..." : "") +
                    "\" is not a split of this model's " + std::to_string(num_layers) + " layers into " +
                    std::to_string(pp) + " stages");
  }
}

void check_profile_matches(const CostProfile& profile, const nlohmann::json& identity, const std::string& path) {
  // The model and the layout first: a profile of another model or pp differs in its
  // partition too, and that is not what to tell the user.
  std::vector<std::pair<std::string, nlohmann::json>> keys;
  for (const char* first : {"model_config", "pp", "tp", "cp"})
    if (identity.contains(first)) keys.emplace_back(first, identity[first]);
  for (auto& [key, value] : identity.items())
    if (std::none_of(keys.begin(), keys.end(), [&](const auto& k) { return k.first == key; }))
      keys.emplace_back(key, value);
  const auto shown = [](const nlohmann::json& value) {
    const std::string text = value.dump();
    return text.size() <= 120 ? text : text.substr(0, 117) + "...";
  };
  for (auto& [key, value] : keys) {
    if (!profile.identity.contains(key) || profile.identity[key] != value)
      throw UserError(path + " was profiled for another " + key + " (" +
                      (profile.identity.contains(key) ? shown(profile.identity[key]) : "none") +
                      ", this run: " + shown(value) + ")" +
                      (key == "cp" ? "; with --cp, leave out --cost-model: the run profiles its CP ranks itself"
                                   : "; profile again with `pipefill profile` for this configuration") +
                      (key == "layer_partition"
                           ? " (leave --layer-partition out and a run with a saved --cost-model places its layers "
                             "as the profile did)"
                           : ""));
  }
  // Keys written only when not at their default (--dtype): a profile that has one the run
  // lacks was measured on another configuration too.
  for (const auto& [key, fallback] : {std::pair<const char*, const char*>{"dtype", "f32"}})
    if (!identity.contains(key) && profile.identity.contains(key) && profile.identity[key] != fallback)
      throw UserError(path + " was profiled for another " + key + " (" + profile.identity[key].dump() +
                      ", this run: \"" + fallback +
                      "\"); profile again with `pipefill profile` for this configuration");
  const auto pp = identity.find("pp");
  if (pp != identity.end() && pp->is_number_integer()) check_profile_stages(profile, pp->get<int>(), path);
}

void check_profile_stages(const CostProfile& profile, int pp, const std::string& path) {
  if (static_cast<int>(profile.stages.size()) != pp)
    throw UserError(path + " has " + stages_text(profile.stages.size()) + " but --pp is " + std::to_string(pp) +
                    "; profile again with `pipefill profile --pp " + std::to_string(pp) + "`");
}

}  // namespace pf::sched
