// `pipefill advise`: which layout to submit. Every pp x cp x tp layout the allocation (and
// its power-of-two shares) can run, with the chunking the source texts' tuning path finds,
// simulated and ranked (sim/layout_search.hpp); the job line for the best.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "errors.hpp"
#include "io/file_checks.hpp"
#include "io/prompts_h5.hpp"
#include "io/replaceable_file.hpp"
#include "model/presets.hpp"
#include "sched/cost_profile.hpp"
#include "sched/prefix_sharing.hpp"
#include "sim/layout_search.hpp"
#include "sim/profile_calibration.hpp"
#include "trace/summary.hpp"

namespace pf::cli {
namespace {

// "12x6,13x2": runs of equal stage sizes, so a deep pipeline's partition fits a column.
std::string partition_runs(const std::vector<model::StageRange>& partition) {
  std::string text;
  for (size_t s = 0; s < partition.size();) {
    size_t end = s;
    while (end < partition.size() && partition[end].count == partition[s].count) ++end;
    text += (text.empty() ? "" : ",") + std::to_string(partition[s].count);
    if (end - s > 1) text += "x" + std::to_string(end - s);
    s = end;
  }
  return text;
}

std::string chunking_text(const sim::ChunkChoice& c) {
  char text[64];
  if (c.dynamic)
    std::snprintf(text, sizeof text, "dynamic C0 %d s %.2f", c.chunk, c.smooth);
  else
    std::snprintf(text, sizeof text, "fixed %d", c.chunk);
  return text;
}

// The run options the layout takes beyond --pp/--cp/--tp/--chunk-size.
std::string extra_run_args(const sim::LayoutAdvice& a, const sim::AdviseRequest& request) {
  std::string args;
  if (a.chunking.dynamic) {
    char smooth[48];
    std::snprintf(smooth, sizeof smooth, "--dynamic-chunking --smooth-factor %.2f", a.chunking.smooth);
    args += smooth;
  }
  if (model::partition_text(a.partition) != model::partition_text(sim::run_default_partition(request, a.pp)))
    args += (args.empty() ? "" : " ") + std::string("--layer-partition ") + model::partition_text(a.partition);
  return args;
}

nlohmann::json row_json(const sim::LayoutAdvice& a, int rank) {
  return {{"rank", rank},
          {"nodes", a.nodes},
          {"gpus", a.gpus()},
          {"pp", a.pp},
          {"cp", a.cp},
          {"tp", a.tp},
          {"layer_partition", model::partition_text(a.partition)},
          {"chunk_policy", a.chunking.dynamic ? "sglang" : "fixed"},
          {"chunk_size", a.chunking.chunk},
          {"smooth_factor", a.chunking.dynamic ? nlohmann::json(a.chunking.smooth) : nlohmann::json(nullptr)},
          {"best_fixed_chunk", a.best_fixed_chunk},
          {"best_fixed_time_s", a.best_fixed_time_s},
          {"time_s", a.time_s},
          {"mean_ttft_s", a.mean_ttft_s},
          {"tokens_per_s", a.tokens_per_s},
          {"efficiency", a.efficiency},
          {"bubble", a.bubble},
          {"bubble_ideal", a.bubble_ideal},
          {"micro_batches", a.micro_batches},
          {"memory_gib",
           {{"weights", a.memory.weights / sim::kGiB},
            {"kv", a.memory.kv / sim::kGiB},
            {"workspace", a.memory.workspace / sim::kGiB},
            {"total", a.memory.total() / sim::kGiB}}},
          {"cross_node_bytes", a.cross_node_bytes}};
}

// The layouts the search could not use, by reason: how many, and the first of each.
void print_left_out(const sim::Advice& advice) {
  std::vector<std::string> reasons;
  for (const auto& out : advice.left_out)
    if (std::find(reasons.begin(), reasons.end(), out.reason) == reasons.end()) reasons.push_back(out.reason);
  if (!reasons.empty()) std::printf("\nleft out:\n");
  for (const std::string& reason : reasons) {
    const sim::Advice::LeftOut* first = nullptr;
    size_t count = 0;
    for (const auto& out : advice.left_out)
      if (out.reason == reason) {
        if (!first) first = &out;
        ++count;
      }
    std::printf("  %zu layout%s: %s (e.g. %s%s%s)\n", count, count == 1 ? "" : "s", reason.c_str(),
                first->layout.c_str(), first->detail.empty() ? "" : ": ", first->detail.c_str());
  }
}

// The model the job line names: --model, else the directory of a config.json, else a placeholder.
std::string job_model_dir(const AdviseOptions& o) {
  if (!o.model.empty()) return o.model;
  if (o.model_config.rfind("synthetic:", 0) == 0) return o.model_config;  // run takes it as --model
  const std::filesystem::path config(model::model_config_file(o.model_config));
  if (config.filename() != "config.json") return "MODEL_DIR";
  return config.has_parent_path() ? config.parent_path().string() : ".";
}

// A word for a shell line: as it is when it is plain, else in single quotes.
std::string shell_word(const std::string& word) {
  const char* plain = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:=,+@";
  if (!word.empty() && word.find_first_not_of(plain) == std::string::npos) return word;
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// The sbatch and srun lines that run the best layout with pipefill, and a note when advise
// modelled another engine than the one the lines run (or a model run refuses: the simulator
// reads any config's FLOPs; run computes only what it implements).
void print_job_lines(const AdviseOptions& o, const sim::AdviseRequest& request, const sim::LayoutAdvice& best) {
  const sim::HardwareSpec& hw = request.hardware;
  const std::string model = shell_word(job_model_dir(o));
  const std::string input = shell_word(o.input.empty() ? "INPUT.h5" : o.input);
  std::string extra = extra_run_args(best, request);
  auto add = [&extra](const std::string& flag, int value) {
    extra += (extra.empty() ? "" : " ") + flag + " " + std::to_string(value);
  };
  if (o.logprobs) extra += (extra.empty() ? "" : " ") + std::string("--logprobs");
  if (o.page_size != sched::kDefaultPageSize) add("--page-size", o.page_size);
  if (o.ring_depth != kDefaultRingDepth) add("--ring-depth", o.ring_depth);
  // A cpu rank's KV pool is --kv-memory-mb (8192 by default), not the node's memory: a layout
  // that needs more says so, or run refuses the line (KV modelled per page: 2 % room).
  const double kv_mib = best.memory.kv / double(1 << 20);
  if (hw.cpu && kv_mib > static_cast<double>(RunOptions{}.placement.kv_memory_mb))
    add("--kv-memory-mb", static_cast<int>(std::ceil(kv_mib * 1.02)));
  const int64_t longest = *std::max_element(request.lengths.begin(), request.lengths.end());
  const int context = request.shape.max_position_embeddings;
  if (context > 0 && longest > context) extra += (extra.empty() ? "" : " ") + std::string("--allow-long-prompts");
  const int per_node = std::min(request.devices_per_node, best.gpus());
  std::printf("\nbest: %s on %d node%s, %s: %.3f s\n", sim::layout_text(best.pp, best.cp, best.tp).c_str(), best.nodes,
              best.nodes == 1 ? "" : "s", chunking_text(best.chunking).c_str(), best.time_s);
  const std::string refusal = model::run_refusal(o.model_config);
  if (!refusal.empty()) {  // a study of another engine's model: no job line run would refuse
    std::printf("note: no job line: `pipefill run` refuses this model (%s)\n", refusal.c_str());
    return;
  }
  if (context > 0 && longest > context)
    std::printf(
        "note: the longest prompt (%lld tokens) is beyond the model's context (%d): the job line adds "
        "--allow-long-prompts\n",
        static_cast<long long>(longest), context);
  const bool bf16_wire = o.wire_bytes != dist::kActivationWireBytes;
  if (request.fp8_weights || bf16_wire)
    std::printf("note: modelled as an engine that %s%s%s; `pipefill run` %s%s%s, so its memory and time differ\n",
                request.fp8_weights ? "keeps FP8 weights" : "", request.fp8_weights && bf16_wire ? " and " : "",
                bf16_wire ? "sends bf16" : "", request.fp8_weights ? "dequantizes FP8 to bf16" : "",
                request.fp8_weights && bf16_wire ? " and " : "", bf16_wire ? "sends float32" : "");
  const std::string vars = "MODEL=" + model + " INPUT=" + input + " OUTPUT=out.h5 PP=" + std::to_string(best.pp) +
                           " CP=" + std::to_string(best.cp) + " TP=" + std::to_string(best.tp) +
                           " CHUNK_SIZE=" + std::to_string(best.chunking.chunk) +
                           (extra.empty() ? "" : " EXTRA_ARGS=" + shell_word(extra));
  if (hw.cpu)  // prefill_cpu.sbatch asks for tasks (#SBATCH --ntasks), which -n replaces
    std::printf("  %s \\\n    sbatch -n %d jobs/slurm/prefill_cpu.sbatch\n", vars.c_str(), best.gpus());
  else
    std::printf("  %s \\\n    sbatch -N %d --ntasks-per-node=%d --gpus-per-node=%d jobs/slurm/prefill.sbatch\n",
                vars.c_str(), best.nodes, per_node, per_node);
  std::printf(
      "  srun -N %d --ntasks-per-node=%d pipefill run --model %s --input %s --output out.h5 --backend %s --pp %d "
      "--cp %d --tp %d --chunk-size %d%s%s\n",
      best.nodes, per_node, model.c_str(), input.c_str(), hw.cpu ? "cpu" : "cuda", best.pp, best.cp, best.tp,
      best.chunking.chunk, extra.empty() ? "" : " ", extra.c_str());
}

// The Python that draws: $PIPEFILL_PYTHON, the project's venv (scripts/setup_venv.sh), python3.
std::string plotting_python() {
  if (const char* chosen = std::getenv("PIPEFILL_PYTHON")) return chosen;
  if (const char* home = std::getenv("HOME")) {
    const std::string venv = std::string(home) + "/.cache/pipefill/venv/bin/python";
    if (access(venv.c_str(), X_OK) == 0) return venv;
  }
  return "python3";
}

void draw_plot(const sim::Advice& advice, const std::string& png) {
  char rows_path[] = "/tmp/pipefill-advice-XXXXXX";
  const int fd = mkstemp(rows_path);
  if (fd < 0) throw UserError("--plot: cannot create a temporary file in /tmp");
  close(fd);
  {
    std::ofstream rows(rows_path);
    for (size_t i = 0; i < advice.ranked.size(); ++i)
      rows << row_json(advice.ranked[i], static_cast<int>(i) + 1).dump() << "\n";
  }
  const std::string python = plotting_python(), script = std::string(PIPEFILL_SCRIPTS_DIR) + "/plot_advice.py";
  std::fflush(stdout);
  const pid_t child = fork();
  if (child == 0) {  // its chatter on stderr: stdout may be --json rows
    dup2(STDERR_FILENO, STDOUT_FILENO);
    execlp(python.c_str(), python.c_str(), script.c_str(), rows_path, "--out", png.c_str(),
           static_cast<char*>(nullptr));
    _exit(127);  // (the parent says what failed)
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) < 0) status = -1;
  std::remove(rows_path);
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
    throw UserError("--plot: " + python + " " + script +
                    " failed (it needs matplotlib: scripts/setup_venv.sh, or "
                    "set PIPEFILL_PYTHON); the table above is complete");
}

// The model a profile measured, from the config it recorded.
model::ModelShape profiled_shape(const sched::CostProfile& profile, const std::string& path) {
  const auto config = profile.identity.find("model_config");
  if (config == profile.identity.end() || !config->is_object())
    throw UserError(path +
                    " does not say which model it measured (no model_config in its identity): give --model-config");
  return model::shape_from_json(*config, path + "'s model_config");
}

}  // namespace

int advise_command(int argc, char** argv) {
  AdviseOptions o;
  if (!parse_advise(argc, argv, o)) return 0;
  sim::AdviseRequest request;
  sched::CostProfile profile;
  if (!o.cost_model.empty()) profile = sched::load_cost_profile(o.cost_model);
  request.shape =
      o.model_config.empty() ? profiled_shape(profile, o.cost_model) : model::shape_of_model_config(o.model_config);
  request.hardware = sim::load_hardware(o.hardware);
  if (!o.cost_model.empty()) {
    const model::ModelShape profiled = profiled_shape(profile, o.cost_model);
    if (profiled.num_layers != request.shape.num_layers || profiled.hidden_size != request.shape.hidden_size ||
        profiled.num_heads != request.shape.num_heads || profiled.num_kv_heads != request.shape.num_kv_heads ||
        profiled.head_dim != request.shape.head_dim || profiled.intermediate_size != request.shape.intermediate_size ||
        profiled.experts != request.shape.experts || profiled.vocab_size != request.shape.vocab_size)
      throw UserError(o.cost_model + " profiled another model (" + profiled.name + ", " +
                      std::to_string(profiled.num_layers) + " layers of " + std::to_string(profiled.hidden_size) +
                      ") than --model-config: leave --model-config out to use the profile's");
    request.hardware = sim::hardware_from_profile(request.hardware, request.shape, profile, o.cost_model);
  }
  if (o.chunk_size > 0) {
    request.fixed_chunks = {o.chunk_size};
    request.tune_dynamic = false;
  }
  request.nodes = o.nodes;
  request.devices_per_node =
      o.gpus_per_node != AdviseOptions::kHardwareFile ? o.gpus_per_node : request.hardware.devices_per_node;
  if (o.fp8 == "keep" && !request.shape.fp8)
    throw UserError("--fp8 keep: " + (o.model_config.empty() ? o.cost_model + "'s model" : o.model_config) +
                    " is not an FP8 checkpoint (no quantization_config fp8)");
  request.fp8_weights = request.shape.fp8 && o.fp8 == "keep";
  if (request.fp8_weights) sim::warn_if_no_fp8_rate(request.hardware);
  request.wire_bytes = o.wire_bytes;
  request.scores = o.logprobs;
  request.ring_depth = o.ring_depth;
  request.page_size = o.page_size;
  if (o.input.empty()) {
    request.lengths = o.lengths;
  } else {  // its prompts' lengths, and with --logprobs their scored spans
    const io::PromptSet prompts = io::read_prompts_isolated(o.input, request.shape.vocab_size);
    request.lengths = prompts.lengths();
    if (o.logprobs)
      for (int p = 0; p < prompts.num_prompts(); ++p) request.score_from.push_back(prompts.first_scored_row(p));
    request.prefixes = sched::find_shared_prefixes(prompts.tokens, prompts.offsets, request.page_size, {},
                                                   o.logprobs ? prompts.score_start : std::vector<int64_t>{});
  }
  if (!o.plot.empty()) {
    io::require_writable_file_path(o.plot, "--plot");
    io::require_distinct_paths({{"--plot", o.plot},
                                {"--input", o.input},
                                {"--model-config", model::model_config_file(o.model_config)},
                                {"--hardware", request.hardware.path},
                                {"--cost-model", o.cost_model}});
    io::require_replaceable(o.plot, "advise --plot", io::StudyFile::kPng);
  }

  const auto t0 = std::chrono::steady_clock::now();
  const sim::Advice advice = sim::advise_layouts(request);
  const double search_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::vector<sim::LayoutAdvice>& ranked = advice.ranked;

  if (o.json) {
    for (size_t i = 0; i < ranked.size(); ++i)
      std::printf("%s\n", row_json(ranked[i], static_cast<int>(i) + 1).dump().c_str());
  } else {
    int64_t tokens = 0, longest = 0, reused = 0;
    for (int64_t n : request.lengths) {
      tokens += n;
      longest = std::max(longest, n);
    }
    for (const sched::PrefixReuse& reuse : request.prefixes.reuse) reused += reuse.tokens;
    const sim::HardwareSpec& hw = request.hardware;
    const std::string shared =
        reused > 0 ? ", " + std::to_string(reused) + " of them reused from shared prefixes, as run does" : "";
    std::printf("advise: %s on %d x %d %s, %zu prompt%s, %lld tokens (longest %lld%s)\n", request.shape.name.c_str(),
                o.nodes, request.devices_per_node, hw.name.c_str(), request.lengths.size(),
                request.lengths.size() == 1 ? "" : "s", static_cast<long long>(tokens), static_cast<long long>(longest),
                shared.c_str());
    std::printf(
        "model: matmuls at %.2f of %s (%s), attention at %.2f of %s (%s); %d-byte activations on the "
        "wire; %d layouts, %d simulations, %.2f s\n",
        hw.matmul_efficiency,
        trace::flop_rate_text(request.fp8_weights ? hw.peak_fp8_flops : hw.peak_bf16_flops).c_str(),
        request.fp8_weights ? "fp8"
        : hw.cpu            ? "float32"
                            : "bf16",
        hw.attention_efficiency, trace::flop_rate_text(hw.peak_bf16_flops).c_str(), hw.path.c_str(), o.wire_bytes,
        advice.layouts_considered, advice.simulations, search_s);
    std::printf("efficiency: strong scaling against the best layout on %d node%s (time x nodes)\n\n", advice.base_nodes,
                advice.base_nodes == 1 ? "" : "s");
    std::printf("%4s %5s %-20s %-13s %-24s %10s %10s %10s %5s %14s %16s %12s\n", "rank", hw.cpu ? "ranks" : "GPUs",
                "layout", "layers", "chunking", "time s", "TTFT s", "tokens/s", "eff", "bubble (ideal)", "GiB/device",
                "across nodes");
    for (size_t i = 0; i < ranked.size() && static_cast<int>(i) < o.top; ++i) {
      const sim::LayoutAdvice& a = ranked[i];
      char bubble[32], memory[32];
      std::snprintf(bubble, sizeof bubble, "%.1f%% (%.1f%%)", 100 * a.bubble, 100 * a.bubble_ideal);
      std::snprintf(memory, sizeof memory, "%.1f (%.1f KV)", a.memory.total() / sim::kGiB, a.memory.kv / sim::kGiB);
      std::printf("%4zu %5d %-20s %-13s %-24s %10.3f %10.3f %10.0f %5.2f %14s %16s %9.1f GB\n", i + 1, a.gpus(),
                  sim::layout_text(a.pp, a.cp, a.tp).c_str(), partition_runs(a.partition).c_str(),
                  chunking_text(a.chunking).c_str(), a.time_s, a.mean_ttft_s, a.tokens_per_s, a.efficiency, bubble,
                  memory, a.cross_node_bytes / 1e9);
    }
    if (static_cast<int>(ranked.size()) > o.top)
      std::printf("(%zu more layouts fit: --top %zu, or --json for all)\n", ranked.size() - o.top, ranked.size());
    print_left_out(advice);

    print_job_lines(o, request, ranked.front());
  }
  if (!o.plot.empty()) {
    draw_plot(advice, o.plot);
    if (!o.json) std::printf("plot: %s\n", o.plot.c_str());
  }
  return 0;
}

}  // namespace pf::cli
