// The option table of every subcommand: one descriptor per option (option_table.hpp), then the
// checks that involve several options, right after parsing, before MPI topology exists.
#include "cli/options.hpp"

#include <cmath>
#include <cstdlib>
#include <vector>

#include "cli/option_table.hpp"
#include "cli/quantities.hpp"
#include "compute/backend_capabilities.hpp"
#include "errors.hpp"
#include "io/token_ids_file.hpp"
#include "sched/context_split.hpp"
#include "sched/cost_profile.hpp"
#include "sched/dynamic_chunker.hpp"
#include "sim/hardware.hpp"
#include "sim/layout_search.hpp"

namespace pf::cli {
namespace {

using sched::ChunkingOptions;
using sched::ChunkPolicyKind;

// ---- spellings of the options that are not plain values -----------------------------

Spelling<compute::BackendKind> backend_spelling() {
  return {
      [](const std::string& name) {
        using compute::BackendKind;
#ifdef PIPEFILL_HAVE_CUDA
        const bool cuda_built = true;
#else
        const bool cuda_built = false;
#endif
        if (name == compute::backend_name(BackendKind::kCuda) && !cuda_built)
          throw UserError("--backend cuda: this pipefill was built without the CUDA toolkit (available: cpu, emulate)");
        for (BackendKind kind : {BackendKind::kCpu, BackendKind::kCuda, BackendKind::kEmulate})
          if (name == compute::backend_name(kind)) return kind;
        throw UserError("--backend " + name + " is unknown (available: cpu, cuda, emulate)");
      },
      [](const compute::BackendKind& kind) { return std::string(compute::backend_name(kind)); }};
}

// An enum flag written as one of its names ("--chunk-policy must be fixed, sglang or pipefill").
template <typename Kind>
Spelling<Kind> named_choice(const std::string& flag, std::vector<Kind> kinds, const char* (*name_of)(Kind)) {
  return {[flag, kinds, name_of](const std::string& name) {
            std::string choices;
            for (size_t i = 0; i < kinds.size(); ++i) {
              if (name == name_of(kinds[i])) return kinds[i];
              choices += (i == 0 ? "" : i + 1 == kinds.size() ? " or " : ", ") + std::string(name_of(kinds[i]));
            }
            throw UserError(flag + " must be " + choices + " (got \"" + name + "\")");
          },
          [name_of](const Kind& kind) { return std::string(name_of(kind)); }};
}

Spelling<compute::HiddenStatesKind> hidden_states_spelling() {
  using compute::HiddenStatesKind;
  return named_choice("--hidden-states", {HiddenStatesKind::kNone, HiddenStatesKind::kLast, HiddenStatesKind::kMean},
                      compute::hidden_states_name);
}

const char* dtype_flag_name(io::Dtype dtype) {
  return dtype == io::Dtype::kBF16 ? "bf16" : "f32";
}

Spelling<io::Dtype> kv_dtype_spelling() {
  return named_choice("--kv-dtype", {io::Dtype::kF32, io::Dtype::kBF16}, dtype_flag_name);
}

Spelling<io::Dtype> dtype_spelling() {
  return named_choice("--dtype", {io::Dtype::kF32, io::Dtype::kBF16}, dtype_flag_name);
}

Spelling<sched::CostSource> cost_source_spelling() {
  return {[](const std::string& text) {
            using Kind = sched::CostSource::Kind;
            const std::string analytic = sched::kAnalyticPrefix;
            if (text.empty()) return sched::CostSource{};
            if (text.rfind(analytic, 0) == 0) return sched::CostSource{Kind::kAnalytic, text.substr(analytic.size())};
            return sched::CostSource{Kind::kProfileFile, text};
          },
          [](const sched::CostSource& source) { return source.flag_text(); }};
}

Spelling<ChunkPolicyKind> policy_spelling() {
  return named_choice("--chunk-policy", {ChunkPolicyKind::kFixed, ChunkPolicyKind::kSglang, ChunkPolicyKind::kPipefill},
                      sched::policy_name);
}

Spelling<sched::CostForm> cost_form_spelling() {
  return {sched::parse_cost_form, [](const sched::CostForm& form) { return std::string(sched::cost_form_name(form)); }};
}

// --profile-stages fills ChunkingOptions::all_stages.
Spelling<bool> profile_stages_spelling() {
  return {[](const std::string& stages) {
            if (stages != "first" && stages != "all") throw UserError("--profile-stages must be first or all");
            return stages == "all";
          },
          [](const bool& all_stages) { return std::string(all_stages ? "all" : "first"); }};
}

bool is_pipefill(const ChunkingOptions& c) {
  return c.policy == ChunkPolicyKind::kPipefill;
}

// ---- options several commands take, declared once ---------------------------------
// Each command adds them to its own table with its own member (and, for run, the key it
// echoes them under); the flag, help and checks live here.

template <typename O>
MemberOption<O, int, int>& add_pp(OptionTable<O>& t, int O::*member, const char* help = "pipeline stages") {
  return t.add("pp", help, member).at_least_one();
}
template <typename O>
MemberOption<O, int, int>& add_tp(OptionTable<O>& t, int O::*member) {
  return t.add("tp", "tensor-parallel ranks per stage", member).at_least_one();
}
template <typename O>
MemberOption<O, std::string, std::string>& add_layer_partition(OptionTable<O>& t, std::string O::*member,
                                                               const std::string& by_default) {
  return t.add("layer-partition", "layers per stage, e.g. 15,15,15,16 (default: " + by_default + ")", member);
}
// What each command does without --layer-partition.
constexpr const char* kEvenLayers = "equal, remainder on the last stages";
template <typename O>
MemberOption<O, int, int>& add_ring_depth(OptionTable<O>& t, int O::*member) {
  return t.add("ring-depth", "receives posted ahead / sends in flight per rank", member).at_least_one();
}
void check_chunk_bound(const int& chunk) {
  if (chunk > sched::kMaxChunkTokens)
    throw UserError("--chunk-size must be at most " + std::to_string(sched::kMaxChunkTokens) + " tokens");
}
template <typename O>
MemberOption<O, int, int>& add_chunk_size(OptionTable<O>& t, int O::*member, const char* help) {
  return t.add("chunk-size", help, member).at_least_one().check(check_chunk_bound);
}
template <typename O>
MemberOption<O, int, int>& add_page_size(OptionTable<O>& t, int O::*member) {
  return t.add("page-size", "tokens per KV-cache page (dynamic chunks align to max(page, 64))", member).at_least_one();
}

// ---- shared tables -----------------------------------------------------------------

// --model ... --kv-memory-fraction: shared by run and profile. pp and tp enter the placement
// identity as the topology has them (pipeline::placed_model_identity), the partition as used.
OptionTable<PlacementOptions> placement_table() {
  using P = PlacementOptions;
  OptionTable<P> t("placement");
  t.add("model", "model directory (config.json + safetensors) or synthetic:PRESET", &P::model)
      .required()
      .echo_as("model", kRunIdentity);
  t.add("seed", "seed of synthetic:PRESET weights", &P::seed).echo_as("seed", kRunIdentity);
  // Not in the run identity: a run resumes onto another layout (a requeued job's new
  // allocation), its checkpoints and KV read by any layout (kvcache/kv_source.hpp).
  add_pp(t, &P::pp).echo_as("pp");
  add_tp(t, &P::tp).echo_as("tp");
  add_layer_partition(t, &P::layer_partition,
                      std::string(kEvenLayers) +
                          "; a run that scores tokens (--logprobs, --top-k, --token-ids) gives the last stage fewer, "
                          "by what its LM head is worth over the prompts, and a run with a saved --cost-model the "
                          "profile's own")
      .echo_as("layer_partition");  // the placement identity holds the partition used (run_record.cpp)
  t.add("expert-split",
        "MoE models: how a TP group splits the routed experts: width (each rank a slice of every expert) or "
        "experts (each rank whole experts; docs/choices.md)",
        &P::expert_split,
        Spelling<model::ExpertSplit>{
            [](const std::string& name) { return model::parse_expert_split(name); },
            [](const model::ExpertSplit& split) { return std::string(model::expert_split_name(split)); }})
      .echo_as("expert_split");  // in the placement identity of MoE models only (run_record.cpp)
  t.add("kv-memory-mb", "KV-cache budget per rank in MiB", &P::kv_memory_mb)
      .at_least_one()
      .check([](const int64_t& mb) {  // bytes (mb << 20) stay exact in 64 bits
        if (mb > (int64_t{1} << 30)) throw UserError("--kv-memory-mb " + std::to_string(mb) + ": at most 2^30 MiB");
      })
      .echo_as("kv_memory_mb");
  t.add("threads",
        "cpu: threads a rank for attention and GEMMs; 0 (default): the CPUs the launcher bound the rank to, or an "
        "even share of the node's CPUs among its ranks, and theirs while they wait. Ranks that share CPUs never use "
        "more than their share while the others work",
        &P::threads)
      .check([](const int& threads) {
        if (threads < 0)
          throw UserError("--threads must be 0 (automatic) or more (got " + std::to_string(threads) + ")");
        // A typo like 100000 would start that many threads in every rank before any compute.
        if (threads > 1024) throw UserError("--threads " + std::to_string(threads) + " is more than 1024 a rank");
      })
      .echo_as("threads");
  t.add("backend",
        "compute backend: cpu or cuda (one GPU per rank, bf16 weights and KV cache), both with every product "
        "(--logprobs, --top-k, --hidden-states, --save-kv, --kv-store); or emulate (sleeps of --cost-model; real MPI, "
        "schedule and message sizes; logits only)",
        &P::backend, backend_spelling())
      .echo_as("backend", kRunIdentity | kPlacementIdentity);
  t.add("dtype",
        "cpu: f32 (default), or bf16: weights and KV cache stored in bf16 (half the memory), GEMM inputs and "
        "attention's Q and P rounded to bf16 where the cuda backend rounds them, every sum float32 (the cuda "
        "backend is bf16 always and takes no --dtype)",
        &P::dtype, dtype_spelling())
      .echo_as("dtype", kRunIdentity | kPlacementIdentity | kOnlyWhenSet);
  t.add("transport",
        "cuda: how hidden states move between stages: nccl, or mpi (staged through host memory; lets ranks share a "
        "GPU)",
        &P::transport)
      .check([](const std::string& transport) {
        if (transport != "nccl" && transport != "mpi")
          throw UserError("--transport " + transport + " is unknown (available: nccl, mpi)");
      })
      .echo_as("transport");
  t.add("kv-memory-fraction", "cuda: share of the device memory left after weights and workspace given to the KV pool",
        &P::kv_memory_fraction)
      .check([](const double& fraction) {
        if (!(fraction > 0 && fraction <= 1)) throw UserError("--kv-memory-fraction must be in (0, 1]");
      })
      .echo_as("kv_memory_fraction");
  return t;
}

// --chunk-size ... --cost-model: shared by run, simulate and plan. Read in this order: the
// policy (and its aliases) first, since the defaults of cost form, stages and folding follow it.
OptionTable<ChunkingOptions> chunking_table() {
  using C = ChunkingOptions;
  OptionTable<C> t("chunking");
  add_chunk_size(t, &C::initial_chunk, "tokens per chunk; with dynamic chunking the initial chunk C0")
      .echo_as("chunk_size", kRunIdentity);
  add_page_size(t, &C::page_size).echo_as("page_size", kRunIdentity);
  t.add("chunk-policy",
        "fixed (the default) | sglang (SGLang dynamic chunking) | pipefill (prefix-aware, every stage, no tiny tail)",
        &C::policy, policy_spelling())
      .optional()
      .echo_as("chunk_policy", kRunIdentity);
  // SGLang's switches for its policy; an explicit dynamic --chunk-policy wins over them, and
  // --chunk-policy fixed contradicts them.
  const auto sglang_unless_policy_given = [](const cxxopts::ParseResult& r, const std::string& flag, C& c) {
    if (!r[flag].as<bool>()) return;
    if (!r.count("chunk-policy")) c.policy = ChunkPolicyKind::kSglang;
    if (c.policy == ChunkPolicyKind::kFixed)
      throw UserError("--" + flag + " asks for dynamic chunks and --chunk-policy fixed for fixed ones: give one");
  };
  t.add_alias("dynamic-chunking", "same as --chunk-policy sglang", std::make_shared<CheckedValue<bool>>(),
              sglang_unless_policy_given);
  t.add_alias("enable-dynamic-chunking", "same as --dynamic-chunking (SGLang's flag name)",
              std::make_shared<CheckedValue<bool>>(), sglang_unless_policy_given);
  t.add("smooth-factor", "s in x = C0 + s (x* - C0); default: $SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR or 0.75",
        &C::smooth_factor)
      .otherwise([](C& c) {
        const char* env = std::getenv("SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR");
        if (!env) return;
        char* end = nullptr;
        c.smooth_factor = std::strtod(env, &end);
        if (end == env || *end != '\0')
          throw UserError(std::string("SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR=\"") + env + "\" is not a number");
      })
      .check([](const double& s) {
        if (!(s >= 0.0 && s <= 1.0)) throw UserError("the smooth factor must lie in [0, 1] (got " + shortest(s) + ")");
      })
      .echo_as("smooth_factor", kRunIdentity);
  t.add("cost-form", "cost model: sglang (fresh-prompt quadratic) or prefix (chunk after a prefix); default per policy",
        &C::cost_form, cost_form_spelling())
      .otherwise([](C& c) { c.cost_form = sched::default_cost_form(c.policy); })
      .echo_as("cost_form");
  t.add("profile-stages", "first (stage 0, as SGLang) or all (the slowest stage sets the beat); default per policy",
        &C::all_stages, profile_stages_spelling())
      .otherwise([](C& c) { c.all_stages = sched::default_all_stages(c.policy); })
      .echo_as("profile_stages");
  t.add("fold-tail",
        "fold a remainder smaller than C0/4 into the chunk before it when the cost model says the drain gets "
        "shorter (on with --chunk-policy pipefill)",
        &C::fold_tail)
      .then([](C& c) { c.fold_tail = c.fold_tail || is_pipefill(c); })
      .echo_as("fold_tail");
  t.add("profile-points", "timed forwards per profile (9-128)", &C::profile_points)
      .check([](const int& points) {
        if (points < 9 || points > 128)
          throw UserError("--profile-points must lie in [9, 128] (8 points at least after the warm-up)");
      })
      .echo_as("profile_points");
  t.add("cost-model",
        "a profile written by `pipefill profile --out` (dynamic chunking reuses it instead of profiling); with "
        "--backend emulate also analytic:HARDWARE (hardware/HARDWARE.json)",
        &C::cost_source, cost_source_spelling())
      .optional()
      .echo_as("cost_model");
  return t;
}

void require_dynamic_for_cost_model(const ChunkingOptions& c) {
  if (!c.dynamic() && !c.cost_source.none())
    throw UserError("--cost-model is used by dynamic chunking: add --dynamic-chunking or --chunk-policy");
}

// plan and simulate read saved profiles only (simulate's hardware is --hardware).
void refuse_analytic_cost_model(const ChunkingOptions& c, const std::string& command) {
  if (c.cost_source.analytic())
    throw UserError("--cost-model analytic:... drives `run --backend emulate`; `pipefill " + command +
                    "` takes a profile written by `pipefill profile`");
}

// ---- the commands' tables ----------------------------------------------------------

OptionTable<RunOptions> run_table() {
  using R = RunOptions;
  OptionTable<R> t;
  t.include(placement_table(), &R::placement);
  t.include(chunking_table(), &R::chunking);
  t.add("input", "input HDF5 (/tokens int32, /offsets int64)", &R::input).required().echo_as("input", kRunIdentity);
  t.add("output", "output HDF5 (written to OUTPUT.partial, renamed on success)", &R::output)
      .required()
      .echo_as("output");
  t.add("trace", "also write a Chrome trace (Perfetto) to this JSON file", &R::trace).echo_as("trace");
  t.add("cp",
        "context parallelism: CP ranks per stage (world = pp x cp x tp, ranks ordered TP innermost, then CP, then "
        "PP), each computing 1/cp of every chunk's tokens and holding 1/cp of each prompt's KV cache (every backend; "
        "on cuda not yet with MLA)",
        &R::cp)
      .at_least_one()
      .echo_as("cp");
  t.add("cp-attention",
        "how CP ranks attend to the keys the others hold: pass-kv (the KV shards go around the ring), pass-q (the "
        "queries travel, partial outputs come back) or auto (per chunk, the one that moves fewer bytes)",
        &R::cp_attention)
      .check([](const std::string& mode) { sched::parse_cp_attention(mode); })
      .echo_as("cp_attention");
  add_ring_depth(t, &R::ring_depth).echo_as("ring_depth");
  t.add("hidden-states",
        "also store each prompt's final-norm hidden state in /hidden_states: last (its last position) or mean (over "
        "the prompt); none: not stored",
        &R::hidden_states, hidden_states_spelling())
      .echo_as("hidden_states", kRunIdentity | kOnlyWhenSet);
  t.add("logprobs",
        "also store every token's log-prob given the tokens before it in /token_logprobs (NaN at a prompt's first "
        "token), and each prompt's /perplexity and /nll_sum",
        &R::logprobs)
      .echo_as("logprobs", kRunIdentity | kOnlyWhenSet);
  t.add("top-k", "also store the K most likely next tokens at every position in /topk_ids and /topk_logprobs (0: none)",
        &R::top_k)
      .check([](const int& k) {
        if (k < 0) throw UserError("--top-k must not be negative (got " + std::to_string(k) + "; 0: none)");
        if (k > kMaxTopK)
          throw UserError("--top-k " + std::to_string(k) + " is more than " + std::to_string(kMaxTopK) +
                          " (it stores 8 bytes per token per candidate)");
      })
      .echo_as("top_k", kRunIdentity | kOnlyWhenSet);
  t.add("token-ids",
        "also store the log-probs of a fixed set of S tokens at every scored position in /token_set_logprobs "
        "[T, S], 4 x S bytes a token (FILE: token ids separated by spaces or commas; scripts/token_ids.py writes "
        "one from strings)",
        &R::token_ids)
      .echo_as("token_ids");
  t.add("save-kv",
        "also write every prompt's KV cache into this directory, one safetensors file per prompt, stage and TP rank, "
        "and DIR/index.json (scripts/pipefill_kv.py loads them as a transformers cache)",
        &R::save_kv)
      .echo_as("save_kv");
  t.add("kv-dtype",
        "the --save-kv files' dtype: f32, or bf16 to halve them (exact on --backend cuda, whose cache is bf16; on cpu "
        "the cache's floats rounded to nearest even)",
        &R::kv_dtype, kv_dtype_spelling())
      .echo_as("kv_dtype", kOnlyWhenSet);
  t.add("kv-store",
        "a directory of KV caches kept across runs: prompts load the longest prefix an earlier run stored there "
        "(same model and precision, any layout) instead of computing it, and every prompt computed is added",
        &R::kv_store)
      .echo_as("kv_store");
  t.add("kv-store-limit",
        "keep the --kv-store directory under this size (500G, 1.5T): after adding its prompts, a run removes the "
        "least recently used entries that no run is using",
        &R::kv_store_limit)
      .echo_as("kv_store_limit");
  t.add("no-prefix-cache",
        "compute every prompt in full, in input order (by default prompts that start with the same tokens run one "
        "after another and compute that prefix once; /reused_tokens says how much each reused)",
        &R::no_prefix_cache)
      .echo_as("no_prefix_cache");
  t.add("checkpoint-every",
        "checkpoint the prompt in flight this often (90s, 10m, 1h; or auto: the Young/Daly interval from the first "
        "checkpoint's cost and --mtbf), written beside the compute into OUTPUT.checkpoint/, so that a kill loses "
        "at most one interval (a stop signal always checkpoints the prompt in flight; see docs/checkpoints.md)",
        &R::checkpoint_every)
      .echo_as("checkpoint_every");
  t.add("mtbf", "--checkpoint-every auto: the mean time between failures of the job's nodes together (24h)", &R::mtbf)
      .echo_as("mtbf");
  t.add("quiet", "no configuration echo, progress or summary", &R::quiet);
  t.add("watchdog-timeout",
        "seconds a rank may wait for a peer before the job is aborted with an error naming the stage and "
        "micro-batch (0: never)",
        &R::watchdog_timeout_s)
      .check([](const double& s) {
        if (s < 0) throw UserError("--watchdog-timeout must not be negative (got " + shortest(s) + "; 0: never)");
      })
      .echo_as("watchdog_timeout_s");
  t.add("progress-interval", "seconds between progress lines from rank 0 (0: none)", &R::progress_interval_s)
      .check([](const double& s) {
        if (s < 0)
          throw UserError("--progress-interval must not be negative (got " + shortest(s) + "; 0: no progress lines)");
      });
  t.add("allow-long-prompts", "accept prompts longer than the model's max_position_embeddings", &R::allow_long_prompts)
      .echo_as("allow_long_prompts");
  t.add("resume",
        "continue an interrupted run: reopen OUTPUT.partial (model, input and configuration must match) and skip "
        "the prompts it holds",
        &R::resume)
      .echo_as("resume");
  t.add("overwrite",
        "replace OUTPUT if it exists (without it, a run refuses to replace an earlier run's output; --resume keeps "
        "what it holds instead)",
        &R::overwrite);
  return t;
}

OptionTable<ProfileOptions> profile_table() {
  using P = ProfileOptions;
  OptionTable<P> t;
  t.include(placement_table(), &P::placement);
  t.add("out", "cost profile JSON to write", &P::out).required();
  add_chunk_size(t, &P::chunk_size, "initial chunk C0 the profile is centred on");
  add_page_size(t, &P::page_size);
  t.add("profile-points", "timed forwards per sample set (9-128)", &P::points).check([](const int& points) {
    if (points < 9 || points > 128) throw UserError("--profile-points must lie in [9, 128]");
  });
  t.add("max-prefix", "longest prefix to profile, in tokens (default 4 x chunk size; use your longest prompt)",
        &P::max_prefix)
      .check([](const int64_t& prefix) {
        if (prefix < 0) throw UserError("--max-prefix must not be negative");
        if (prefix > (int64_t{1} << 40)) throw UserError("--max-prefix must be at most 2^40 tokens");
      })
      .then([](P& o) {
        if (o.max_prefix == 0) o.max_prefix = 4ll * o.chunk_size;
      });
  t.add("logprobs",
        "profile the layers of runs that score every token (--logprobs, --top-k): the last stage, which also runs "
        "the LM head on every token, gets fewer, as for prompts of --max-prefix + chunk tokens (runs given this "
        "profile use its partition)",
        &P::logprobs);
  return t;
}

// plan and simulate build a batch's whole plan in memory (tens of bytes a micro-batch):
// lengths and a chunk that would make more than this many are an error, not a bad_alloc.
template <typename Options>
void require_plannable(const Options& o) {
  constexpr double kMaxMicroBatches = sched::kStudyStageChunks;
  double count = 0;
  for (int64_t length : o.lengths) count += std::ceil(static_cast<double>(length) / o.chunking.initial_chunk);
  if (count > kMaxMicroBatches)
    throw UserError("--length and --chunk-size " + std::to_string(o.chunking.initial_chunk) + " make " +
                    (count < 1e15 ? std::to_string(static_cast<long long>(count)) : shortest(count)) +
                    " chunks, more than the " + std::to_string(static_cast<long long>(kMaxMicroBatches)) +
                    " a plan holds: a larger --chunk-size");
}

// --cp-attention without --cp, in run and simulate alike.
void require_cp_for_cp_attention(int cp, const std::string& cp_attention) {
  if (cp == 1 && cp_attention != "auto")
    throw UserError("--cp-attention chooses how CP ranks attend: add --cp 2 or more");
}

// An FP8 checkpoint's matmuls in the study commands: as `run` computes them, or as SGLang does.
template <typename Options>
void add_fp8(OptionTable<Options>& t, std::string Options::*member) {
  t.add("fp8",
        "an FP8 checkpoint: dequantize (bf16 weights and matmuls, what `pipefill run` does) or keep (FP8 "
        "weights, matmuls at the fp8 rate, as SGLang runs them)",
        member)
      .check([](const std::string& mode) {
        if (mode != "dequantize" && mode != "keep") throw UserError("--fp8 must be dequantize or keep");
      });
}

// simulate and advise: a run with per-token scores costs more on the last stage.
constexpr const char* kModelScoresHelp =
    "model a run that scores every token (--logprobs, --top-k, --token-ids, spans): the LM head on every token of "
    "the last stage (from the hardware file's rates; a --cost-model carries what its profile ran), and with --cp "
    "the memory of every row gathered to the last stage's CP rank 0";

OptionTable<SimulateOptions> simulate_table() {
  using S = SimulateOptions;
  // As the hardware file's (sim/hardware.cpp): so that no prediction is inf or 300 digits long.
  auto efficiency = [](const char* flag) {
    return [flag](const double& e) {
      if (!(e >= sim::kMinEfficiency && e <= 1))
        throw UserError(std::string("--") + flag + " must lie in [" + shortest(sim::kMinEfficiency) + ", 1] (got " +
                        shortest(e) + ")");
    };
  };
  OptionTable<S> t;
  t.include(chunking_table(), &S::chunking);
  t.add("model-config", "the model's config.json (dense, MoE or MLA), or synthetic:PRESET", &S::model_config)
      .required();
  t.add("hardware", "hardware description: a file of hardware/ by name (h20, h100, h200, cpu, ...) or a JSON path",
        &S::hardware)
      .required();
  add_fp8(t, &S::fp8);
  add_pp(t, &S::pp);
  add_tp(t, &S::tp);
  t.add("cp",
        "context parallelism: CP ranks per stage, each computing 1/cp of every chunk's tokens and attending over "
        "a ring (ranks ordered TP innermost, then CP, then PP, as `run --cp` places them)",
        &S::cp)
      .at_least_one();
  t.add("cp-attention",
        "the CP ring: pass-kv (the KV shards travel), pass-q (the queries travel, partial outputs come back) or "
        "auto (per chunk, the one that moves fewer bytes, as run chooses)",
        &S::cp_attention)
      .check([](const std::string& mode) { sched::parse_cp_attention(mode); });
  add_layer_partition(t, &S::layer_partition,
                      std::string(kEvenLayers) + "; with a saved --cost-model, the profile's own");
  t.add("length", "prompt length in tokens (repeat for several prompts)", &S::lengths)
      .required()
      .at_least_one()
      .then([](const S& o) { require_plannable(o); });
  t.add("cached-tokens",
        "tokens of the prompt's prefix already in the KV cache (a shared prefix computed before): once per "
        "--length, or once for all; the prompt's chunks start there",
        &S::cached_tokens)
      .optional();
  add_ring_depth(t, &S::ring_depth);
  // Given, 0 is refused like any value out of range (untouched, it means "the hardware file's").
  t.add("matmul-efficiency", "override the hardware file's matmul efficiency", &S::matmul_efficiency)
      .optional()
      .check_given(efficiency("matmul-efficiency"));
  t.add("attention-efficiency", "override the hardware file's attention efficiency", &S::attention_efficiency)
      .optional()
      .check_given(efficiency("attention-efficiency"));
  t.add("matmul-half-rows", "override the hardware file's GEMM rows at half efficiency", &S::matmul_half_rows)
      .optional()
      .check_given([](const double& rows) {  // (its untouched value, "the file's", is negative)
        if (!(rows >= 0 && rows <= 1e6)) throw UserError("--matmul-half-rows must lie in [0, 1e6]");
      });
  t.add("wire-bytes",
        "bytes per activation on the wire (P2P and TP all-reduce): 4, what pipefill sends "
        "(float32), or 2 to model a system that sends bf16 (SGLang: its published figures)",
        &S::wire_bytes)
      .check([](const int& bytes) {
        if (bytes != 2 && bytes != 4) throw UserError("--wire-bytes must be 2 (bf16) or 4 (float32)");
      });
  t.add("logprobs", kModelScoresHelp, &S::logprobs);
  t.add("timeline", "write the simulated timeline (the output file's format, no logits) to this HDF5 file",
        &S::timeline);
  t.add("json", "print the results as JSON", &S::json);
  return t;
}

OptionTable<AdviseOptions> advise_table() {
  using A = AdviseOptions;
  OptionTable<A> t;
  t.add("model-config",
        "the model's config.json (dense, MoE or MLA), or synthetic:PRESET (default with --cost-model: the "
        "profile's model)",
        &A::model_config);
  t.add("hardware", "hardware description: a file of hardware/ by name (h20, h100, h200, cpu, ...) or a JSON path",
        &A::hardware)
      .required();
  t.add("cost-model",
        "a `pipefill profile --tp 1` of this model on this machine: its measured rates replace the hardware file's "
        "efficiencies",
        &A::cost_model);
  t.add("chunk-size",
        "only fixed chunks of this size (default: the tuning path searches chunk sizes and dynamic "
        "chunking)",
        &A::chunk_size)
      .optional()
      .check_given([](const int& chunk) {  // untouched, 0 means "searched"
        if (chunk < 1) throw UserError("--chunk-size must be at least 1 (or left out: searched)");
        check_chunk_bound(chunk);  // the job line must be one `run` takes
      });
  t.add("nodes", "nodes in the allocation (layouts on 1, 2, 4, ... of them are ranked too)", &A::nodes).at_least_one();
  t.add("gpus-per-node", "devices a node (default: the hardware file's gpus_per_node)", &A::gpus_per_node)
      .optional()
      .check([](const int& gpus) {
        if (gpus != AdviseOptions::kHardwareFile && gpus < 1) throw UserError("--gpus-per-node must be at least 1");
      });
  t.add("length", "prompt length in tokens (repeat for a batch), or --input", &A::lengths).optional().at_least_one();
  t.add("input", "an HDF5 input (pipefill run --input): its prompts' lengths are the batch", &A::input);
  add_fp8(t, &A::fp8);
  t.add("wire-bytes", "bytes per activation on the wire: 4 (pipefill, float32) or 2 (a bf16 sender, SGLang)",
        &A::wire_bytes)
      .check([](const int& bytes) {
        if (bytes != 2 && bytes != 4) throw UserError("--wire-bytes must be 2 (bf16) or 4 (float32)");
      });
  t.add("logprobs", std::string(kModelScoresHelp) + "; the job line asks for --logprobs", &A::logprobs);
  add_ring_depth(t, &A::ring_depth);
  add_page_size(t, &A::page_size);
  t.add("top", "layouts in the table", &A::top).at_least_one();
  t.add("model", "the model directory the printed job line names (default: --model-config's directory)", &A::model);
  t.add("plot", "draw TTFT against GPUs for the best layouts to this PNG (needs Python with matplotlib)", &A::plot);
  t.add("json", "print every ranked layout as a JSON line instead of the table", &A::json);
  return t;
}

OptionTable<MakeModelOptions> make_model_table() {
  using M = MakeModelOptions;
  OptionTable<M> t;
  t.add("preset", "tiny, tiny-qwen2, tiny-qwen3, tiny-moe, tiny-mla, small, small-moe or llama3-8b", &M::preset)
      .required();
  t.add("out", "directory to create", &M::out).required();
  t.add("seed", "weight seed", &M::seed);
  t.add("dtype", "stored dtype: f32 or bf16", &M::dtype).check([](const std::string& dtype) {
    if (dtype != "f32" && dtype != "bf16") throw UserError("--dtype must be f32 or bf16");
  });
  t.add("max-shard-mb", "largest safetensors file in MiB; bigger models are sharded with an index", &M::max_shard_mb)
      .at_least_one()
      .check([](const int64_t& mb) {
        if (mb > (int64_t{1} << 30)) throw UserError("--max-shard-mb must be at most 1073741824 (1 PiB)");
      });
  t.add("overwrite", "replace the model --out already holds (a directory of make-model's files only)", &M::overwrite);
  return t;
}

OptionTable<MakePromptsOptions> make_prompts_table() {
  using M = MakePromptsOptions;
  OptionTable<M> t;
  t.add("out", "HDF5 file to write", &M::out).required();
  t.add("num", "number of prompts", &M::num).required().at_least_one();
  t.add("min-len", "shortest prompt in tokens", &M::min_len).required().at_least_one();
  t.add("max-len", "longest prompt in tokens", &M::max_len).required();
  t.add("vocab", "token ids are drawn from [0, vocab)", &M::vocab).required().at_least_one();
  t.add("seed", "random seed", &M::seed);
  return t;
}

OptionTable<PlanOptions> plan_table() {
  using P = PlanOptions;
  OptionTable<P> t;
  t.include(chunking_table(), &P::chunking);
  t.add("length", "prompt length in tokens (repeat for several prompts)", &P::lengths)
      .required()
      .at_least_one()
      .then([](const P& o) { require_plannable(o); });
  t.add("coefficients", "cost model a,b (SGLang form) or a,b,c[,gamma] (prefix form) instead of --cost-model",
        &P::coefficients)
      .optional();
  add_pp(t, &P::pp, "pipeline stages the plan is for (tail folding weighs the drain through them)");
  t.add("json", "print JSON instead", &P::json);
  return t;
}

}  // namespace

std::string usage() {
  return "pipefill " PIPEFILL_VERSION
         " - chunked pipeline-parallel prefill of very long prompts\n\n"
         "usage: pipefill <command> [options]    (pipefill <command> --help for its options)\n\n"
         "commands:\n"
         "  run           prefill the prompts of an HDF5 file (launch with mpirun/srun, pp x cp x tp ranks)\n"
         "  profile       time each stage's chunks and save the fitted cost models (mpirun, pp x tp ranks)\n"
         "  plan          print the chunk sizes a chunk policy gives for prompt lengths\n"
         "  simulate      predict TTFT, throughput and bubble of a schedule on some hardware (no MPI, no GPU)\n"
         "  advise        rank the layouts (pp x cp x tp, chunking) an allocation can run, with the job line\n"
         "  make-model    write a seeded random model in Hugging Face layout (config.json + safetensors)\n"
         "  make-prompts  write an HDF5 input file of random prompts\n";
}

nlohmann::json to_json(const RunOptions& options) {
  return run_table().echo(options);
}

nlohmann::json run_identity_options(const RunOptions& options) {
  return run_table().identity(options, kRunIdentity);
}

nlohmann::json placement_identity_options(const PlacementOptions& options) {
  return placement_table().identity(options, kPlacementIdentity);
}

// Every product the flags ask for, against what the backend declares it supports
// (compute/backend_capabilities.hpp); the model-dependent part is asked at set-up.
void check_backend_supports(const RunOptions& o) {
  using compute::Product;
  struct Asked {
    bool asked;
    Product product;
    const char* flag;
  };
  const Asked products[] = {
      {o.hidden_states != compute::HiddenStatesKind::kNone, Product::kHiddenStates, "--hidden-states"},
      {o.logprobs, Product::kTokenScores, "--logprobs"},
      {o.top_k > 0, Product::kTokenScores, "--top-k"},
      {!o.token_ids.empty(), Product::kTokenScores, "--token-ids"},
      {!o.save_kv.empty(), Product::kKvExport, "--save-kv"},
      {!o.kv_store.empty(), Product::kKvStore, "--kv-store"},
      {!o.checkpoint_every.empty(), Product::kKvExport, "--checkpoint-every"},
      {o.placement.dtype == io::Dtype::kBF16, Product::kBf16Choice, "--dtype bf16"},
  };
  for (const Asked& a : products)
    if (a.asked && !compute::supports(o.placement.backend, a.product))
      throw UserError(compute::refusal(o.placement.backend, a.product, a.flag));
}

// --cp-attention without --cp, refused before anything runs (what a backend cannot do with
// --cp, its factory refuses: latent rows too wide for cuda's partial kernel).
void check_context_parallel(const RunOptions& o) {
  require_cp_for_cp_attention(o.cp, o.cp_attention);
}

void check_token_rows_fit(const RunOptions& o, int set_size) {
  // A chunk's token rows travel as one MPI message of (1 + 2k + S) floats a token.
  const int64_t longest = sched::longest_chunk(o.chunking.initial_chunk, o.chunking.page_size);
  if (longest * io::TokenRowShape{o.logprobs, o.top_k, set_size}.floats_per_token() <= (int64_t{1} << 30)) return;
  const std::string set = std::to_string(set_size) + " --token-ids", top_k = "--top-k " + std::to_string(o.top_k);
  const std::string asked = set_size == 0 ? top_k : o.top_k == 0 ? set : top_k + " and " + set;
  throw UserError(asked + " with chunks of up to " + std::to_string(longest) +
                  " tokens make messages of more than 2^30 floats: ask for fewer, or a smaller --chunk-size");
}

bool parse_run(int argc, char** argv, RunOptions& o) {
  if (!run_table().parse("pipefill run", "Prefill every prompt of an HDF5 input through a pp x cp x tp pipeline.", argc,
                         argv, o))
    return false;
  o.chunking.stages = o.placement.pp;
  const bool emulate = o.placement.backend == compute::BackendKind::kEmulate;
  const sched::CostSource& costs = o.chunking.cost_source;
  if (emulate && costs.none())
    throw UserError("--backend emulate needs --cost-model cost.json or --cost-model analytic:HARDWARE");
  if (!emulate && costs.analytic())
    throw UserError("--cost-model analytic:... drives the emulator: add --backend emulate");
  if (!emulate) require_dynamic_for_cost_model(o.chunking);
  if (o.resume && o.overwrite)
    throw UserError("--resume keeps what OUTPUT holds and --overwrite replaces it: give one of them");
  check_backend_supports(o);
  check_context_parallel(o);
  if (!o.kv_store_limit.empty()) {
    if (o.kv_store.empty()) throw UserError("--kv-store-limit limits the size of --kv-store: add --kv-store DIR");
    o.kv_store_limit_bytes = parse_size("--kv-store-limit", o.kv_store_limit);
  }
  if (!o.checkpoint_every.empty())
    o.checkpoint_interval_s =
        o.checkpoint_every == "auto" ? -1 : parse_duration("--checkpoint-every", o.checkpoint_every);
  o.mtbf_s = parse_duration("--mtbf", o.mtbf);
  if (o.checkpoint_every.empty() && o.mtbf != "24h")
    throw UserError("--mtbf sets the interval of --checkpoint-every auto: add --checkpoint-every auto");
  if (o.kv_dtype != io::Dtype::kF32 && o.save_kv.empty())
    throw UserError(
        "--kv-dtype sets the dtype of --save-kv's files: add --save-kv DIR (--kv-store always keeps float32, "
        "so that a loaded prefix gives what computing it gives)");
  check_token_rows_fit(o, 0);  // (again with the --token-ids set once rank 0 has read it)
  // --output equal to --input (or any other clash of paths, links included) is refused by
  // io::require_distinct_paths before anything is read, with both paths in the message.
  return true;
}

bool parse_profile(int argc, char** argv, ProfileOptions& o) {
  return profile_table().parse("pipefill profile",
                               "Time each stage's own layers on fresh prompts and on chunks after prefixes, fit both "
                               "cost models, and save them for `run --cost-model` and `plan --cost-model`.",
                               argc, argv, o);
}

bool parse_simulate(int argc, char** argv, SimulateOptions& o) {
  if (!simulate_table().parse("pipefill simulate",
                              "Discrete-event simulation of the schedule `run` executes, for a model on some "
                              "hardware: TTFT per prompt, throughput, busy fractions, bubble, traffic. No MPI, no "
                              "weights.",
                              argc, argv, o))
    return false;
  o.chunking.stages = o.pp;
  refuse_analytic_cost_model(o.chunking, "simulate");
  // The devices of the largest allocation advise searches, in 64 bits.
  constexpr int64_t kMaxDevices = int64_t{sim::kMaxNodes} * sim::kMaxDevicesPerNode;
  if (int64_t{o.pp} * o.cp * o.tp > kMaxDevices)
    throw UserError("--pp " + std::to_string(o.pp) + " x --cp " + std::to_string(o.cp) + " x --tp " +
                    std::to_string(o.tp) + " devices: simulate models up to " + std::to_string(kMaxDevices));
  require_cp_for_cp_attention(o.cp, o.cp_attention);  // as run refuses it
  if (o.cached_tokens.size() == 1) o.cached_tokens.assign(o.lengths.size(), o.cached_tokens[0]);
  if (o.cached_tokens.empty()) o.cached_tokens.assign(o.lengths.size(), 0);
  if (o.cached_tokens.size() != o.lengths.size())
    throw UserError("--cached-tokens is given " + std::to_string(o.cached_tokens.size()) + " times for " +
                    std::to_string(o.lengths.size()) + " prompts (--length): give it once per prompt, or once for all");
  for (size_t p = 0; p < o.lengths.size(); ++p)
    if (o.cached_tokens[p] < 0 || o.cached_tokens[p] >= o.lengths[p])
      throw UserError("--cached-tokens " + std::to_string(o.cached_tokens[p]) + " for a prompt of " +
                      std::to_string(o.lengths[p]) +
                      " tokens: it must be at least 0 and below the length (the last token is always computed)");
  return true;
}

bool parse_advise(int argc, char** argv, AdviseOptions& o) {
  if (!advise_table().parse("pipefill advise",
                            "Rank the pp x cp x tp layouts and chunkings an allocation can run for a model and a "
                            "batch, each simulated (pipefill simulate), with the job line for the best.",
                            argc, argv, o))
    return false;
  if (o.lengths.empty() == o.input.empty())
    throw UserError("give the batch as --length (repeat for several prompts) or as --input FILE.h5, one of the two");
  if (o.model_config.empty() && o.cost_model.empty())
    throw UserError("--model-config is required (or --cost-model, whose profile names the model)");
  return true;
}

bool parse_make_model(int argc, char** argv, MakeModelOptions& o) {
  return make_model_table().parse("pipefill make-model", "Write a seeded random model in Hugging Face layout.", argc,
                                  argv, o);
}

bool parse_make_prompts(int argc, char** argv, MakePromptsOptions& o) {
  if (!make_prompts_table().parse("pipefill make-prompts", "Write an HDF5 input of random prompts.", argc, argv, o))
    return false;
  if (o.max_len < o.min_len) throw UserError("--max-len must be at least --min-len");
  // Made in memory (4 bytes a token, 8 an offset): at most 2^32 tokens and offsets together.
  if (static_cast<double>(o.num) * (static_cast<double>(o.max_len) + 2) > 4294967296.0)
    throw UserError(
        "--num x (--max-len + 2) may be at most 4294967296 (the tokens and offsets are made in "
        "memory, 16 GiB and more): make fewer or shorter prompts");
  return true;
}

bool parse_plan(int argc, char** argv, PlanOptions& o) {
  if (!plan_table().parse("pipefill plan",
                          "Print the chunk sizes a chunk policy gives, one per line (a blank line between prompts).",
                          argc, argv, o))
    return false;
  o.chunking.stages = o.pp;
  require_dynamic_for_cost_model(o.chunking);
  refuse_analytic_cost_model(o.chunking, "plan");
  if (o.chunking.dynamic()) {
    if (o.coefficients.empty() == o.chunking.cost_source.none())
      throw UserError("dynamic chunking in `plan` needs exactly one of --cost-model or --coefficients");
    if (!o.coefficients.empty() && (o.coefficients.size() < 2 || o.coefficients.size() > 4))
      throw UserError("--coefficients takes a,b or a,b,c or a,b,c,gamma");
    if (!o.coefficients.empty()) {
      const auto& k = o.coefficients;
      sched::check_coefficients(
          {sched::CostForm::kPrefixAware, k[0], k[1], k.size() > 2 ? k[2] : 0.0, k.size() > 3 ? k[3] : 0.0},
          "--coefficients");
    }
  } else if (!o.coefficients.empty()) {
    throw UserError("--coefficients is used by dynamic chunking: add --dynamic-chunking or --chunk-policy");
  }
  return true;
}

}  // namespace pf::cli
