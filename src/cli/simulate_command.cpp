// `pipefill simulate`: the schedule `run` executes, simulated (sim/simulated_run.cpp) with
// stage costs from an analytic model of the hardware (or a saved profile), the same plan
// code and the same dynamic-chunking profile procedure (read from the model instead of
// timed, exactly as the emulate backend does).
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "dist/activation_wire.hpp"
#include "errors.hpp"
#include "io/file_checks.hpp"
#include "io/replaceable_file.hpp"
#include "io/results_h5.hpp"
#include "model/layer_partition.hpp"
#include "model/model_shape.hpp"
#include "model/presets.hpp"
#include "sched/cost_profile.hpp"
#include "sched/hidden_slots.hpp"
#include "sched/plan_flops.hpp"
#include "sim/gpu_memory.hpp"
#include "sim/profile_calibration.hpp"
#include "sim/simulated_run.hpp"
#include "trace/summary.hpp"
#include "trace/traffic.hpp"

namespace pf::cli {
namespace {

// The CP ring's traffic over the plan: what one rank of each stage sends and which variant
// each chunk took, beside the seeds' pass-KV formula for the batch as one pass (2 B S H_kv L:
// every rank's KV shard passes the cp - 1 others). Chunking re-sends a prompt's earlier KV
// with each later chunk under pass-KV, so the model's pass-KV bytes exceed the formula's.
void print_cp_ring(const sched::BatchPlan& plan, const std::vector<sim::StageCost>& costs, int64_t batch_tokens,
                   const char* link) {
  for (size_t s = 0; s < costs.size(); ++s) {
    const sim::CpStageCost& c = costs[s].cp;
    sim::CpRing kv_ring = c.ring;
    kv_ring.mode = sim::CpAttention::kPassKv;
    double bytes = 0, pass_kv_bytes = 0;
    size_t pass_q = 0;
    for (const auto& mb : plan.micro_batches) {
      const sim::CpLayerStep step = c.layer_step(static_cast<double>(mb.start), mb.length);
      bytes += c.layers * step.bytes_sent;
      pass_q += step.variant == sim::CpAttention::kPassQ;
      pass_kv_bytes += c.layers * sim::cp_layer_step(kv_ring, 0.0, static_cast<double>(mb.start), mb.length).bytes_sent;
    }
    const double formula =
        c.layers * c.ring.kv_bytes_per_token * static_cast<double>(batch_tokens) * (c.ring.ranks - 1) / c.ring.ranks;
    std::printf(
        "CP ring, stage %zu (%s, %s): %.3g GB sent by each rank, %zu of %zu chunks by pass-Q; pass-KV "
        "throughout would send %.3g GB; the seeds' 2 B S H_kv L, one pass: %.3g GB\n",
        s, sim::cp_attention_name(c.ring.mode), link, bytes / 1e9, pass_q, plan.micro_batches.size(),
        pass_kv_bytes / 1e9, formula / 1e9);
  }
}

// The layers each stage holds. A saved profile stands for the model, pp and partition it
// timed (`run` refuses it for another, and so does this): its partition unless
// --layer-partition gives the same one.
std::vector<model::StageRange> simulated_partition(const SimulateOptions& o, const model::ModelShape& shape,
                                                   const std::optional<sched::CostProfile>& profile) {
  const auto given = [&](const std::string& text) {
    return text.empty()
               ? model::run_default_partition(shape, o.pp, o.lengths, o.logprobs ? o.lengths : std::vector<int64_t>{})
               : model::parse_partition(text, shape.num_layers, o.pp);
  };
  if (!profile) return given(o.layer_partition);
  const std::string& path = o.chunking.cost_source.value;
  sched::check_profile_stages(*profile, o.pp, path);
  // Its stages' times are the profiled TP group's and CP ring's: another --tp would be timed
  // as that one, and a ring's steps as if there were one.
  if (const int cp = sim::profiled_count(*profile, "cp", path); cp != 1)
    throw UserError(path + " was profiled at cp " + std::to_string(cp) +
                    ": its stages' times include that ring's steps; simulate models CP analytically (leave out "
                    "--cost-model, give --cp)");
  const int profiled_tp = sim::profiled_count(*profile, "tp", path);
  if (profiled_tp != o.tp)
    throw UserError(path + " was profiled at tp " + std::to_string(profiled_tp) + " and times its stages as that, " +
                    "not --tp " + std::to_string(o.tp) + ": profile at this tp, or leave out --cost-model for the " +
                    "analytic costs (`pipefill advise --cost-model` scales a one-rank profile to other layouts)");
  const auto config = profile->identity.find("model_config");
  if (config != profile->identity.end() && !model::same_costs(model::shape_from_json(*config, path), shape))
    throw UserError(path + " was profiled on another model than --model-config " + o.model_config +
                    ": profile that model, or leave out --cost-model for the analytic costs");
  const std::string profiled = profile->layer_partition();
  if (!o.layer_partition.empty() && !profiled.empty() && model::partition_text(given(o.layer_partition)) != profiled)
    throw UserError(path + " was profiled for another layer_partition (\"" + profiled + "\", --layer-partition " +
                    o.layer_partition + "): leave --layer-partition out to use the profile's");
  return o.layer_partition.empty() ? sched::profiled_partition(*profile, shape.num_layers, o.pp, path)
                                   : given(o.layer_partition);
}

}  // namespace

int simulate_command(int argc, char** argv) {
  SimulateOptions o;
  if (!parse_simulate(argc, argv, o)) return 0;
  const model::ModelShape shape = model::shape_of_model_config(o.model_config);
  model::validate_tensor_parallel(shape, o.tp);  // the TP sizes `run` and `advise` take, no others
  sim::HardwareSpec hw = sim::load_hardware(o.hardware);
  if (!o.timeline.empty()) {  // before the simulation, and never over one of its inputs
    io::require_writable_file_path(o.timeline, "--timeline");
    io::require_distinct_paths(
        {{"--timeline", o.timeline},
         {"--model-config", model::model_config_file(o.model_config)},
         {"--hardware", hw.path},
         {"--cost-model", o.chunking.cost_source.profile_file() ? o.chunking.cost_source.value : ""}});
    io::require_replaceable(o.timeline, "simulate --timeline", io::StudyFile::kSimulatedTimeline);
  }
  if (o.matmul_efficiency > 0) hw.matmul_efficiency = o.matmul_efficiency;
  if (o.attention_efficiency > 0) hw.attention_efficiency = o.attention_efficiency;
  if (o.matmul_half_rows >= 0) hw.matmul_half_rows = o.matmul_half_rows;
  const sched::CostSource& saved = o.chunking.cost_source;  // a profile, or none (options.cpp)
  if (o.cp > 1 && saved.profile_file())
    throw UserError("--cp models the CP ring analytically: it cannot use a measured --cost-model profile");
  const std::optional<sched::CostProfile> profile =
      saved.profile_file() ? std::optional(sched::load_cost_profile(saved.value)) : std::nullopt;
  // With a profile only the links between stages come from --hardware: they must be the
  // profiled machine's kind.
  if (profile) sim::require_profiled_machine(*profile, hw, saved.value);
  const auto partition = simulated_partition(o, shape, profile);
  const sim::CpRequest cp{o.cp, sim::parse_cp_attention(o.cp_attention)};
  if (o.fp8 == "keep" && !shape.fp8)
    throw UserError("--fp8 keep: " + o.model_config + " is not an FP8 checkpoint (no quantization_config fp8)");
  const bool fp8_kept = shape.fp8 && o.fp8 == "keep";
  if (fp8_kept && !profile) sim::warn_if_no_fp8_rate(hw);
  const std::vector<sim::StageCost> costs =
      profile ? sim::profiled_stage_costs(*profile, o.pp)
              : sim::analytic_stage_costs(shape, hw, partition, o.tp, fp8_kept, o.wire_bytes, cp);

  const std::string refusal = model::run_refusal(o.model_config);
  if (!refusal.empty())  // a study of another engine's model, from its shape alone
    std::fprintf(stderr, "note: `pipefill run` refuses this model (%s); simulated from its shape\n", refusal.c_str());
  sim::SimulatedRunSpec spec;
  spec.pp = o.pp;
  spec.cp = o.cp;
  spec.tp = o.tp;
  spec.hidden_size = shape.hidden_size;
  spec.chunking = o.chunking;
  spec.lengths = o.lengths;
  spec.cached_tokens = o.cached_tokens;
  spec.ring_depth = o.ring_depth;
  spec.wire_bytes = o.wire_bytes;
  spec.scores = o.logprobs;
  for (int s = 0; s + 1 < o.pp; ++s) spec.links.push_back(sim::stage_link(hw, s, o.tp, o.cp));
  sim::SimulatedRun run = sim::simulate_run(spec, costs);
  const sched::BatchPlan& plan = run.plan;
  const sim::SimResult& result = run.result;
  const std::string& policy_used = run.policy_used;
  const std::string& note = run.note;
  run.summary.model_flops = sched::plan_flops(shape, plan);
  const trace::RunSummary& summary = run.summary;
  trace::TrafficReport traffic =
      trace::traffic_formulas(plan, shape.hidden_size, o.wire_bytes, o.tp, o.cp, partition,
                              sched::last_stage_reads_every_row(o.logprobs, false), shape.mla());
  traffic.boundary_bytes = result.boundary_bytes;
  traffic.allreduce_modelled = true;

  int64_t cached = 0, prompt_tokens = 0, longest = 0;
  for (size_t p = 0; p < o.lengths.size(); ++p) {
    cached += o.cached_tokens[p];
    prompt_tokens += o.lengths[p];
    longest = std::max(longest, o.lengths[p]);
  }
  // A layout whose devices cannot hold it still gets its time (a study may want it), but not
  // silently: advise leaves such layouts out, and `run` would fail to place it.
  if (!profile) {
    const sim::DeviceStorage storage = sim::DeviceStorage::of(hw, fp8_kept);
    const sim::DeviceMemory need =
        sim::busiest_device(shape, partition, o.tp, o.cp, o.chunking.initial_chunk, o.chunking.page_size, longest,
                            storage, o.ring_depth, o.logprobs);
    if (!sim::fits_device(need, storage))
      std::fprintf(stderr,
                   "warning: this layout does not fit %s: stage %d's devices need %.1f GiB of weights, %.1f GiB of KV "
                   "and %.1f GiB of workspace, and one has %.1f GiB (the times below are of a machine that could "
                   "hold it; `pipefill advise` ranks the layouts that fit)\n",
                   hw.name.c_str(), need.stage, need.weights / sim::kGiB, need.kv / sim::kGiB,
                   need.workspace / sim::kGiB, storage.memory_bytes / sim::kGiB);
  }
  if (o.json) {
    nlohmann::json j = {{"model", shape.name},
                        {"hardware", hw.name},
                        {"pp", o.pp},
                        {"cached_tokens", cached},
                        {"cp", o.cp},
                        {"tp", o.tp},
                        {"policy", policy_used},
                        {"note", note},
                        {"ttft_s", summary.ttft_s},
                        {"makespan_s", result.makespan_s},
                        {"tokens_per_s", summary.tokens_per_s},
                        {"stage_busy_fraction", summary.stage_busy_fraction},
                        {"bubble", summary.bubble_measured},
                        {"bubble_ideal", summary.bubble_ideal},
                        {"micro_batches", summary.num_micro_batches}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    const std::string layout = "pp " + std::to_string(o.pp) + (o.cp > 1 ? " x cp " + std::to_string(o.cp) : "") +
                               " x tp " + std::to_string(o.tp);
    std::printf("simulate: %s (%.1fB active params%s) on %s | %s | layers %s | chunk %d (%s)%s%s\n", shape.name.c_str(),
                shape.active_parameters() / 1e9,
                fp8_kept    ? ", fp8 kept"
                : shape.fp8 ? ", fp8 dequantized"
                            : "",
                hw.name.c_str(), layout.c_str(), model::partition_text(partition).c_str(), o.chunking.initial_chunk,
                policy_used.c_str(), note.empty() ? "" : " | ", note.c_str());
    if (cached > 0)
      std::printf(
          "prefix reuse: %lld of %lld prompt tokens cached (their chunks are not computed; attention still "
          "reads them)\n",
          static_cast<long long>(cached), static_cast<long long>(prompt_tokens));
    trace::print_summary(summary, stdout, /*max_prompts=*/1 << 30);
    trace::print_chunk_advice(summary, plan, policy_used, stdout);
    trace::print_traffic(traffic, stdout);
    if (o.cp > 1)
      print_cp_ring(plan, costs, prompt_tokens, o.cp * o.tp <= hw.devices_per_node ? "within a node" : "across nodes");
  }
  if (!o.timeline.empty()) {
    io::OutputLayout layout;
    layout.num_prompts = plan.num_prompts();
    layout.vocab_size = shape.vocab_size;
    layout.with_logits = false;
    io::ResultWriter writer(o.timeline, layout, {{io::kSimulatedKey, true}}, /*resume=*/false, /*timeout_s=*/0,
                            /*disposable=*/true);
    for (int p = 0; p < plan.num_prompts(); ++p)
      writer.write_prompt(p, nullptr, nullptr, summary.ttft_s[p], plan.reuse[p].tokens);
    writer.finish(result.events, {{"version", PIPEFILL_VERSION},
                                  {"simulated", 1},
                                  {"hardware", hw.name},
                                  {"pp", o.pp},
                                  {"cp", o.cp},
                                  {"tp", o.tp},
                                  {"chunk_size", o.chunking.initial_chunk},
                                  {"chunk_policy_used", policy_used},
                                  {"model_config", o.model_config},
                                  {"wall_s", result.makespan_s}});
  }
  return 0;
}

}  // namespace pf::cli
