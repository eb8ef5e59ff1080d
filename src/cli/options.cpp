// Option tables (cxxopts), defaults, and the validation that can happen before MPI
// topology exists. Conflicts and impossible values are rejected right after parsing.
#include "cli/options.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cxxopts.hpp>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <type_traits>

#include "errors.hpp"
#include "sched/cost_profile.hpp"

namespace pf::cli {
namespace {

// A flag's text that does not convert to the flag's type. Thrown by CheckedValue while
// cxxopts parses; parse() adds the flag it was given to (cxxopts' own exception names only
// the text). A UserError, so that it still reads sensibly if it ever escapes elsewhere.
struct InvalidValue : UserError {
  InvalidValue(std::string text_, std::string element_, std::string problem_)
      : UserError("\"" + element_ + "\" " + problem_),
        text(std::move(text_)),
        element(std::move(element_)),
        problem(std::move(problem_)) {}
  std::string text;     // the whole value given
  std::string element;  // the list element that failed (the whole value for a scalar)
  std::string problem;  // "is not a valid integer", ...
};

// Each convert returns "" or what is wrong with the text.
template <typename T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
std::string convert(const std::string& text, T& out) {
  try {
    cxxopts::values::parse_value(text, out);
    return "";
  } catch (const cxxopts::exceptions::incorrect_argument_type&) {
  }
  if constexpr (std::is_same_v<T, bool>) {
    return "is not true or false";
  } else {
    const bool negative = !text.empty() && text[0] == '-';
    const std::string digits = text.substr(negative ? 1 : 0);
    const bool integer = !digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos;
    const std::string range = "an integer from " + std::to_string(std::numeric_limits<T>::min()) + " to " +
                              std::to_string(std::numeric_limits<T>::max());
    if (integer) return "is out of range (" + range + ")";
    return std::is_signed_v<T> ? "is not a valid integer" : "is not a valid non-negative integer";
  }
}

// Stricter than cxxopts' stream parse, which takes "0.5x" as 0.5.
std::string convert(const std::string& text, double& out) {
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) || end != text.c_str() + text.size())
    return "is not a valid number";
  if (!std::isfinite(out)) return "is not a finite number";
  return "";
}

std::string convert(const std::string& text, std::string& out) {
  out = text;
  return "";
}

template <typename T>
void store(const std::string& text, T& target) {
  T value{};
  const std::string problem = convert(text, value);
  if (!problem.empty()) throw InvalidValue(text, text, problem);
  target = value;
}

// A list flag takes comma-separated elements and may be repeated: each occurrence appends.
template <typename T>
void store(const std::string& text, std::vector<T>& target) {
  std::vector<T> values;
  for (size_t begin = 0;;) {
    const size_t comma = text.find(',', begin);
    const std::string element = text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    T value{};
    const std::string problem = convert(element, value);
    if (!problem.empty()) throw InvalidValue(text, element, problem);
    values.push_back(value);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  target.insert(target.end(), values.begin(), values.end());
}

// cxxopts' value with our conversions and messages. A subclass of standard_value<T>, so
// ParseResult::as<T>() finds it as usual.
template <typename T>
class CheckedValue final : public cxxopts::values::standard_value<T> {
 public:
  void parse(const std::string& text) const override { store(text, *this->m_store); }
  std::shared_ptr<cxxopts::Value> clone() const override { return std::make_shared<CheckedValue<T>>(*this); }
};

template <typename T>
std::shared_ptr<cxxopts::Value> value() {
  return std::make_shared<CheckedValue<T>>();
}

// The flag that was given `text` as its value: the first `--flag text`, `--flag=text`,
// `-x text` or `-xtext` in argv that fails alone with the same table. Empty if none does
// (a bad default: a bug, not a user error).
std::string flag_given(cxxopts::Options& table, int argc, char** argv, const std::string& text) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-' || arg == "-") continue;
    std::string flag, given;
    const bool is_long = arg[1] == '-';
    const size_t equals = arg.find('=');
    const bool attached = (is_long && equals != std::string::npos) || (!is_long && arg.size() > 2);
    if (is_long && equals != std::string::npos) {
      flag = arg.substr(0, equals);
      given = arg.substr(equals + 1);
    } else if (!is_long && arg.size() > 2) {
      flag = arg.substr(0, 2);
      given = arg.substr(2);
    } else if (i + 1 < argc) {
      flag = arg;
      given = argv[i + 1];
    } else {
      continue;
    }
    if (given != text) continue;
    // Probe in the form given: `--quiet maybe` leaves "maybe" unmatched, `--quiet=maybe` fails.
    const char* probe[] = {"pipefill", argv[i], attached ? nullptr : argv[i + 1]};
    try {
      table.parse(attached ? 2 : 3, probe);
    } catch (const InvalidValue&) {
      return flag;
    } catch (const cxxopts::exceptions::exception&) {
    }
  }
  return "";
}

// Parses, turning cxxopts' exceptions into UserError; prints help and returns nullopt on --help.
std::optional<cxxopts::ParseResult> parse(cxxopts::Options& table, int argc, char** argv) {
  table.add_options()("h,help", "show this help");
  try {
    auto result = table.parse(argc, argv);
    if (result.count("help")) {
      std::cout << table.help() << std::endl;
      return std::nullopt;
    }
    if (!result.unmatched().empty())
      throw UserError("unexpected argument \"" + result.unmatched().front() + "\" (see --help)");
    return result;
  } catch (const InvalidValue& e) {
    const std::string flag = flag_given(table, argc, argv, e.text);
    if (!flag.empty() && e.text.rfind("--", 0) == 0)  // `--chunk-size --pp 2`: the next flag was taken as the value
      throw UserError(flag + " needs a value (it got the flag \"" + e.text + "\") (see --help)");
    const std::string where = e.element == e.text ? "" : " (in \"" + e.text + "\")";
    throw UserError((flag.empty() ? "" : flag + ": ") + "\"" + e.element + "\" " + e.problem + where + " (see --help)");
  } catch (const cxxopts::exceptions::exception& e) {
    throw UserError(std::string(e.what()) + " (see --help)");
  }
}

template <typename T>
T required(const cxxopts::ParseResult& result, const std::string& name) {
  if (!result.count(name)) throw UserError("--" + name + " is required (see --help)");
  return result[name].as<T>();
}

void require_positive(long long value, const char* flag) {
  if (value < 1) throw UserError(std::string(flag) + " must be at least 1 (got " + std::to_string(value) + ")");
}

template <typename T>
std::string text(const T& value) {
  return std::to_string(value);
}

// A number as a user would write it ("-1", "0.5"), for messages.
std::string shortest(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// --model ... --backend: shared by run and profile.
void add_placement_options(cxxopts::Options& table) {
  const PlacementOptions d;
  table.add_options("placement")
      ("model", "model directory (config.json + safetensors) or synthetic:PRESET", value<std::string>())
      ("seed", "seed of synthetic:PRESET weights", value<uint64_t>()->default_value(text(d.seed)))
      ("pp", "pipeline stages", value<int>()->default_value(text(d.pp)))
      ("tp", "tensor-parallel ranks per stage", value<int>()->default_value(text(d.tp)))
      ("layer-partition", "layers per stage, e.g. 15,15,15,16 (default: equal, remainder on the last stages)",
       value<std::string>()->default_value(d.layer_partition))
      ("kv-memory-mb", "KV-cache budget per rank in MiB", value<int64_t>()->default_value(text(d.kv_memory_mb)))
      ("backend", "compute backend: cpu, cuda (one GPU per rank, bf16), or emulate (sleeps of --cost-model; "
       "real MPI, schedule and message sizes)",
       value<std::string>()->default_value(d.backend))
      ("transport", "cuda: how hidden states move between stages: nccl, or mpi (staged through host memory; "
       "lets ranks share a GPU)", value<std::string>()->default_value(d.transport))
      ("kv-memory-fraction", "cuda: share of the device memory left after weights and workspace given to the KV pool",
       value<double>()->default_value(text(d.kv_memory_fraction)));
}

PlacementOptions read_placement(const cxxopts::ParseResult& r) {
  PlacementOptions p;
  p.model = required<std::string>(r, "model");
  p.seed = r["seed"].as<uint64_t>();
  p.pp = r["pp"].as<int>();
  p.tp = r["tp"].as<int>();
  p.layer_partition = r["layer-partition"].as<std::string>();
  p.kv_memory_mb = r["kv-memory-mb"].as<int64_t>();
  p.backend = r["backend"].as<std::string>();
  require_positive(p.pp, "--pp");
  require_positive(p.tp, "--tp");
  require_positive(p.kv_memory_mb, "--kv-memory-mb");
  p.transport = r["transport"].as<std::string>();
  p.kv_memory_fraction = r["kv-memory-fraction"].as<double>();
#ifdef PIPEFILL_HAVE_CUDA
  const bool cuda_built = true;
#else
  const bool cuda_built = false;
#endif
  if (p.backend == "cuda" && !cuda_built)
    throw UserError("--backend cuda: this pipefill was built without the CUDA toolkit (available: cpu, emulate)");
  if (p.backend != "cpu" && p.backend != "emulate" && p.backend != "cuda")
    throw UserError("--backend " + p.backend + " is unknown (available: cpu, cuda, emulate)");
  if (p.transport != "nccl" && p.transport != "mpi")
    throw UserError("--transport " + p.transport + " is unknown (available: nccl, mpi)");
  if (!(p.kv_memory_fraction > 0 && p.kv_memory_fraction <= 1))
    throw UserError("--kv-memory-fraction must be in (0, 1]");
  return p;
}

// --chunk-size ... --cost-model: shared by run and plan.
void add_chunking_options(cxxopts::Options& table) {
  const sched::ChunkingOptions d;
  table.add_options("chunking")
      ("chunk-size", "tokens per chunk; with dynamic chunking the initial chunk C0",
       value<int>()->default_value(text(d.initial_chunk)))
      ("page-size", "tokens per KV-cache page (dynamic chunks align to max(page, 64))",
       value<int>()->default_value(text(d.page_size)))
      ("chunk-policy", "fixed | sglang (SGLang dynamic chunking) | pipefill (prefix-aware, every stage, no tiny tail)",
       value<std::string>())
      ("dynamic-chunking", "same as --chunk-policy sglang", value<bool>()->default_value("false"))
      ("enable-dynamic-chunking", "same as --dynamic-chunking (SGLang's flag name)",
       value<bool>()->default_value("false"))
      ("smooth-factor", "s in x = C0 + s (x* - C0); default: $SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR or 0.75",
       value<double>())
      ("cost-form", "cost model: sglang (fresh-prompt quadratic) or prefix (chunk after a prefix); default per policy",
       value<std::string>())
      ("profile-stages", "first (stage 0, as SGLang) or all (the slowest stage sets the beat); default per policy",
       value<std::string>())
      ("fold-tail", "fold a remainder smaller than C0/4 into the chunk before it when the cost model says the drain "
       "gets shorter (on with --chunk-policy pipefill)",
       value<bool>()->default_value("false"))
      ("profile-points", "timed forwards per profile (9-128)", value<int>()->default_value(text(d.profile_points)))
      ("cost-model", "a profile written by `pipefill profile --out` (dynamic chunking reuses it instead of profiling); "
       "with --backend emulate also analytic:HARDWARE (hardware/HARDWARE.json)",
       value<std::string>());
}

sched::ChunkingOptions read_chunking(const cxxopts::ParseResult& r) {
  sched::ChunkingOptions c;
  c.initial_chunk = r["chunk-size"].as<int>();
  c.page_size = r["page-size"].as<int>();
  require_positive(c.initial_chunk, "--chunk-size");
  require_positive(c.page_size, "--page-size");
  if (r.count("chunk-policy")) {
    const std::string name = r["chunk-policy"].as<std::string>();
    if (name == "fixed") c.policy = sched::ChunkPolicyKind::kFixed;
    else if (name == "sglang") c.policy = sched::ChunkPolicyKind::kSglang;
    else if (name == "pipefill") c.policy = sched::ChunkPolicyKind::kPipefill;
    else throw UserError("--chunk-policy must be fixed, sglang or pipefill (got \"" + name + "\")");
  } else if (r["dynamic-chunking"].as<bool>() || r["enable-dynamic-chunking"].as<bool>()) {
    c.policy = sched::ChunkPolicyKind::kSglang;
  }
  const bool pipefill = c.policy == sched::ChunkPolicyKind::kPipefill;
  c.cost_form = pipefill ? sched::CostForm::kPrefixAware : sched::CostForm::kFreshQuadratic;
  c.all_stages = pipefill;
  c.fold_tail = pipefill || r["fold-tail"].as<bool>();
  if (r.count("cost-form")) c.cost_form = sched::parse_cost_form(r["cost-form"].as<std::string>());
  if (r.count("profile-stages")) {
    const std::string stages = r["profile-stages"].as<std::string>();
    if (stages != "first" && stages != "all") throw UserError("--profile-stages must be first or all");
    c.all_stages = stages == "all";
  }
  if (r.count("smooth-factor")) {
    c.smooth_factor = r["smooth-factor"].as<double>();
  } else if (const char* env = std::getenv("SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR")) {
    char* end = nullptr;
    c.smooth_factor = std::strtod(env, &end);
    if (end == env || *end != '\0')
      throw UserError(std::string("SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR=\"") + env + "\" is not a number");
  }
  if (!(c.smooth_factor >= 0.0 && c.smooth_factor <= 1.0))
    throw UserError("the smooth factor must lie in [0, 1] (got " + shortest(c.smooth_factor) + ")");
  c.profile_points = r["profile-points"].as<int>();
  if (c.profile_points < 9 || c.profile_points > 128)
    throw UserError("--profile-points must lie in [9, 128] (8 points at least after the warm-up)");
  if (r.count("cost-model")) c.cost_model_path = r["cost-model"].as<std::string>();
  return c;
}

}  // namespace

std::string usage() {
  return "pipefill " PIPEFILL_VERSION
         " - chunked pipeline-parallel prefill of very long prompts\n\n"
         "usage: pipefill <command> [options]    (pipefill <command> --help for its options)\n\n"
         "commands:\n"
         "  run           prefill the prompts of an HDF5 file (launch with mpirun/srun, pp x tp ranks)\n"
         "  profile       time each stage's chunks and save the fitted cost models (mpirun, pp x tp ranks)\n"
         "  plan          print the chunk sizes a chunk policy gives for prompt lengths\n"
         "  simulate      predict TTFT, throughput and bubble of a schedule on some hardware (no MPI, no GPU)\n"
         "  make-model    write a seeded random model in Hugging Face layout (config.json + safetensors)\n"
         "  make-prompts  write an HDF5 input file of random prompts\n";
}

nlohmann::json to_json(const RunOptions& o) {
  const auto& p = o.placement;
  const auto& c = o.chunking;
  return {{"model", p.model},
          {"seed", p.seed},
          {"pp", p.pp},
          {"tp", p.tp},
          {"layer_partition", p.layer_partition},
          {"kv_memory_mb", p.kv_memory_mb},
          {"backend", p.backend},
          {"transport", p.transport},
          {"kv_memory_fraction", p.kv_memory_fraction},
          {"input", o.input},
          {"output", o.output},
          {"chunk_size", c.initial_chunk},
          {"page_size", c.page_size},
          {"chunk_policy", sched::policy_name(c.policy)},
          {"smooth_factor", c.smooth_factor},
          {"cost_form", sched::cost_form_name(c.cost_form)},
          {"profile_stages", c.all_stages ? "all" : "first"},
          {"fold_tail", c.fold_tail},
          {"profile_points", c.profile_points},
          {"cost_model", c.cost_model_path},
          {"trace", o.trace},
          {"ring_depth", o.ring_depth},
          {"watchdog_timeout_s", o.watchdog_timeout_s},
          {"allow_long_prompts", o.allow_long_prompts},
          {"resume", o.resume}};
}

bool parse_run(int argc, char** argv, RunOptions& o) {
  cxxopts::Options table("pipefill run", "Prefill every prompt of an HDF5 input through a pp x tp pipeline.");
  const RunOptions d;
  table.add_options()
      ("input", "input HDF5 (/tokens int32, /offsets int64)", value<std::string>())
      ("output", "output HDF5 (written to OUTPUT.partial, renamed on success)", value<std::string>())
      ("trace", "also write a Chrome trace (Perfetto) to this JSON file", value<std::string>()->default_value(""))
      ("ring-depth", "receives posted ahead / sends in flight per rank", value<int>()->default_value(text(d.ring_depth)))
      ("quiet", "no configuration echo, progress or summary", value<bool>()->default_value("false"))
      ("watchdog-timeout", "seconds a rank may wait for a peer before the job is aborted with an error naming "
       "the stage and micro-batch (0: never)", value<double>()->default_value(text(d.watchdog_timeout_s)))
      ("progress-interval", "seconds between progress lines from rank 0 (0: none)",
       value<double>()->default_value(text(d.progress_interval_s)))
      ("allow-long-prompts", "accept prompts longer than the model's max_position_embeddings",
       value<bool>()->default_value("false"))
      ("resume", "continue an interrupted run: reopen OUTPUT.partial (model, input and configuration must match) "
       "and skip the prompts it holds", value<bool>()->default_value("false"));
  add_placement_options(table);
  add_chunking_options(table);
  auto result = parse(table, argc, argv);
  if (!result) return false;
  const auto& r = *result;
  o.placement = read_placement(r);
  o.chunking = read_chunking(r);
  o.chunking.stages = o.placement.pp;
  o.input = required<std::string>(r, "input");
  o.output = required<std::string>(r, "output");
  o.trace = r["trace"].as<std::string>();
  o.ring_depth = r["ring-depth"].as<int>();
  o.quiet = r["quiet"].as<bool>();
  o.watchdog_timeout_s = r["watchdog-timeout"].as<double>();
  o.progress_interval_s = r["progress-interval"].as<double>();
  o.allow_long_prompts = r["allow-long-prompts"].as<bool>();
  o.resume = r["resume"].as<bool>();
  require_positive(o.ring_depth, "--ring-depth");
  if (o.watchdog_timeout_s < 0)
    throw UserError("--watchdog-timeout must not be negative (got " + shortest(o.watchdog_timeout_s) + "; 0: never)");
  if (o.progress_interval_s < 0)
    throw UserError("--progress-interval must not be negative (got " + shortest(o.progress_interval_s) +
                    "; 0: no progress lines)");
  const bool emulate = o.placement.backend == "emulate";
  const std::string& costs = o.chunking.cost_model_path;
  if (emulate && costs.empty())
    throw UserError("--backend emulate needs --cost-model cost.json or --cost-model analytic:HARDWARE");
  if (!emulate && costs.rfind("analytic:", 0) == 0)
    throw UserError("--cost-model analytic:... drives the emulator: add --backend emulate");
  if (!emulate && !o.chunking.dynamic() && !costs.empty())
    throw UserError("--cost-model is used by dynamic chunking: add --dynamic-chunking or --chunk-policy");
  // --output equal to --input (or any other clash of paths, links included) is refused by
  // io::require_distinct_paths before anything is read, with both paths in the message.
  return true;
}

bool parse_profile(int argc, char** argv, ProfileOptions& o) {
  cxxopts::Options table("pipefill profile",
                         "Time each stage's own layers on fresh prompts and on chunks after prefixes, fit both cost "
                         "models, and save them for `run --cost-model` and `plan --cost-model`.");
  const ProfileOptions d;
  table.add_options()
      ("out", "cost profile JSON to write", value<std::string>())
      ("chunk-size", "initial chunk C0 the profile is centred on", value<int>()->default_value(text(d.chunk_size)))
      ("page-size", "tokens per KV-cache page", value<int>()->default_value(text(d.page_size)))
      ("profile-points", "timed forwards per sample set (9-128)", value<int>()->default_value(text(d.points)))
      ("max-prefix", "longest prefix to profile, in tokens (default 4 x chunk size; use your longest prompt)",
       value<int64_t>()->default_value("0"));
  add_placement_options(table);
  auto result = parse(table, argc, argv);
  if (!result) return false;
  const auto& r = *result;
  o.placement = read_placement(r);
  o.out = required<std::string>(r, "out");
  o.chunk_size = r["chunk-size"].as<int>();
  o.page_size = r["page-size"].as<int>();
  o.points = r["profile-points"].as<int>();
  o.max_prefix = r["max-prefix"].as<int64_t>();
  require_positive(o.chunk_size, "--chunk-size");
  require_positive(o.page_size, "--page-size");
  if (o.points < 9 || o.points > 128) throw UserError("--profile-points must lie in [9, 128]");
  if (o.max_prefix < 0) throw UserError("--max-prefix must not be negative");
  if (o.max_prefix == 0) o.max_prefix = 4ll * o.chunk_size;
  return true;
}

bool parse_simulate(int argc, char** argv, SimulateOptions& o) {
  cxxopts::Options table("pipefill simulate",
                         "Discrete-event simulation of the schedule `run` executes, for a model on some hardware: "
                         "TTFT per prompt, throughput, busy fractions, bubble, traffic. No MPI, no weights.");
  const SimulateOptions d;
  table.add_options()
      ("model-config", "the model's config.json (dense, MoE or MLA), or synthetic:PRESET", value<std::string>())
      ("hardware", "hardware description: h20, h100, h200, cpu (hardware/NAME.json) or a JSON path",
       value<std::string>())
      ("pp", "pipeline stages", value<int>()->default_value(text(d.pp)))
      ("tp", "tensor-parallel ranks per stage", value<int>()->default_value(text(d.tp)))
      ("layer-partition", "layers per stage (default: equal, remainder on the last stages)",
       value<std::string>()->default_value(""))
      ("length", "prompt length in tokens (repeat for several prompts)", value<std::vector<int64_t>>())
      ("ring-depth", "receives posted ahead / sends in flight per rank", value<int>()->default_value(text(d.ring_depth)))
      ("matmul-efficiency", "override the hardware file's matmul efficiency", value<double>())
      ("attention-efficiency", "override the hardware file's attention efficiency", value<double>())
      ("timeline", "write the simulated timeline (the output file's format, no logits) to this HDF5 file",
       value<std::string>()->default_value(""))
      ("json", "print the results as JSON", value<bool>()->default_value("false"));
  add_chunking_options(table);
  auto result = parse(table, argc, argv);
  if (!result) return false;
  const auto& r = *result;
  o.model_config = required<std::string>(r, "model-config");
  o.hardware = required<std::string>(r, "hardware");
  o.pp = r["pp"].as<int>();
  o.tp = r["tp"].as<int>();
  o.layer_partition = r["layer-partition"].as<std::string>();
  o.lengths = required<std::vector<int64_t>>(r, "length");
  o.ring_depth = r["ring-depth"].as<int>();
  o.chunking = read_chunking(r);
  o.chunking.stages = o.pp;
  if (r.count("matmul-efficiency")) o.matmul_efficiency = r["matmul-efficiency"].as<double>();
  if (r.count("attention-efficiency")) o.attention_efficiency = r["attention-efficiency"].as<double>();
  o.timeline = r["timeline"].as<std::string>();
  o.json = r["json"].as<bool>();
  require_positive(o.pp, "--pp");
  require_positive(o.tp, "--tp");
  require_positive(o.ring_depth, "--ring-depth");
  for (int64_t length : o.lengths) require_positive(length, "--length");
  for (double e : {o.matmul_efficiency, o.attention_efficiency})
    if (e < 0 || e > 1) throw UserError("efficiencies must lie in (0, 1]");
  return true;
}

bool parse_make_model(int argc, char** argv, MakeModelOptions& o) {
  cxxopts::Options table("pipefill make-model", "Write a seeded random model in Hugging Face layout.");
  const MakeModelOptions d;
  table.add_options()
      ("preset", "tiny, tiny-qwen2, tiny-qwen3, small or llama3-8b", value<std::string>())
      ("out", "directory to create", value<std::string>())
      ("seed", "weight seed", value<uint64_t>()->default_value(text(d.seed)))
      ("dtype", "stored dtype: f32 or bf16", value<std::string>()->default_value(d.dtype))
      ("max-shard-mb", "largest safetensors file in MiB; bigger models are sharded with an index",
       value<int64_t>()->default_value(text(d.max_shard_mb)));
  auto result = parse(table, argc, argv);
  if (!result) return false;
  o.preset = required<std::string>(*result, "preset");
  o.out = required<std::string>(*result, "out");
  o.seed = (*result)["seed"].as<uint64_t>();
  o.dtype = (*result)["dtype"].as<std::string>();
  o.max_shard_mb = (*result)["max-shard-mb"].as<int64_t>();
  if (o.dtype != "f32" && o.dtype != "bf16") throw UserError("--dtype must be f32 or bf16");
  require_positive(o.max_shard_mb, "--max-shard-mb");
  return true;
}

bool parse_make_prompts(int argc, char** argv, MakePromptsOptions& o) {
  cxxopts::Options table("pipefill make-prompts", "Write an HDF5 input of random prompts.");
  table.add_options()
      ("out", "HDF5 file to write", value<std::string>())
      ("num", "number of prompts", value<int>())
      ("min-len", "shortest prompt in tokens", value<int64_t>())
      ("max-len", "longest prompt in tokens", value<int64_t>())
      ("vocab", "token ids are drawn from [0, vocab)", value<int>())
      ("seed", "random seed", value<uint64_t>()->default_value("0"));
  auto result = parse(table, argc, argv);
  if (!result) return false;
  o.out = required<std::string>(*result, "out");
  o.num = required<int>(*result, "num");
  o.min_len = required<int64_t>(*result, "min-len");
  o.max_len = required<int64_t>(*result, "max-len");
  o.vocab = required<int>(*result, "vocab");
  o.seed = (*result)["seed"].as<uint64_t>();
  require_positive(o.num, "--num");
  require_positive(o.min_len, "--min-len");
  require_positive(o.vocab, "--vocab");
  if (o.max_len < o.min_len) throw UserError("--max-len must be at least --min-len");
  return true;
}

bool parse_plan(int argc, char** argv, PlanOptions& o) {
  cxxopts::Options table("pipefill plan",
                         "Print the chunk sizes a chunk policy gives, one per line (a blank line between prompts).");
  table.add_options()
      ("length", "prompt length in tokens (repeat for several prompts)", value<std::vector<int64_t>>())
      ("coefficients", "cost model a,b (SGLang form) or a,b,c[,gamma] (prefix form) instead of --cost-model",
       value<std::vector<double>>())
      ("pp", "pipeline stages the plan is for (tail folding weighs the drain through them)",
       value<int>()->default_value("1"))
      ("json", "print JSON instead", value<bool>()->default_value("false"));
  add_chunking_options(table);
  auto result = parse(table, argc, argv);
  if (!result) return false;
  o.lengths = required<std::vector<int64_t>>(*result, "length");
  o.chunking = read_chunking(*result);
  o.chunking.stages = (*result)["pp"].as<int>();
  require_positive(o.chunking.stages, "--pp");
  if (result->count("coefficients")) o.coefficients = (*result)["coefficients"].as<std::vector<double>>();
  o.json = (*result)["json"].as<bool>();
  for (int64_t length : o.lengths) require_positive(length, "--length");
  if (!o.chunking.dynamic() && !o.chunking.cost_model_path.empty())
    throw UserError("--cost-model is used by dynamic chunking: add --dynamic-chunking or --chunk-policy");
  if (o.chunking.dynamic()) {
    if (o.coefficients.empty() == o.chunking.cost_model_path.empty())
      throw UserError("dynamic chunking in `plan` needs exactly one of --cost-model or --coefficients");
    if (!o.coefficients.empty() && (o.coefficients.size() < 2 || o.coefficients.size() > 4))
      throw UserError("--coefficients takes a,b or a,b,c or a,b,c,gamma");
    if (!o.coefficients.empty()) {
      const auto& k = o.coefficients;
      sched::check_coefficients({sched::CostForm::kPrefixAware, k[0], k[1], k.size() > 2 ? k[2] : 0.0,
                                 k.size() > 3 ? k[3] : 0.0},
                                "--coefficients");
    }
  } else if (!o.coefficients.empty()) {
    throw UserError("--coefficients is used by dynamic chunking: add --dynamic-chunking or --chunk-policy");
  }
  return true;
}

}  // namespace pf::cli
