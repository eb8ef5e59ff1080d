// Option tables (cxxopts), defaults, and the validation that can happen before MPI
// topology exists. Conflicts and impossible values are rejected right after parsing.
#include "cli/options.hpp"

#include <cxxopts.hpp>
#include <iostream>

#include "errors.hpp"

namespace pf::cli {
namespace {

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

}  // namespace

std::string usage() {
  return "pipefill " PIPEFILL_VERSION
         " - chunked pipeline-parallel prefill of very long prompts\n\n"
         "usage: pipefill <command> [options]    (pipefill <command> --help for its options)\n\n"
         "commands:\n"
         "  run           prefill the prompts of an HDF5 file (launch with mpirun/srun, pp x tp ranks)\n"
         "  make-model    write a seeded random model in Hugging Face layout (config.json + safetensors)\n"
         "  make-prompts  write an HDF5 input file of random prompts\n"
         "  plan          print the chunk sizes a chunk policy gives for prompt lengths\n";
}

nlohmann::json to_json(const RunOptions& o) {
  return {{"model", o.model},
          {"input", o.input},
          {"output", o.output},
          {"pp", o.pp},
          {"tp", o.tp},
          {"chunk_size", o.chunk_size},
          {"page_size", o.page_size},
          {"layer_partition", o.layer_partition},
          {"kv_memory_mb", o.kv_memory_mb},
          {"backend", o.backend},
          {"trace", o.trace},
          {"ring_depth", o.ring_depth},
          {"seed", o.seed}};
}

bool parse_run(int argc, char** argv, RunOptions& o) {
  cxxopts::Options table("pipefill run", "Prefill every prompt of an HDF5 input through a pp x tp pipeline.");
  const RunOptions d;
  table.add_options()("model", "model directory (config.json + safetensors) or synthetic:PRESET",
                      cxxopts::value<std::string>())("input", "input HDF5 (/tokens int32, /offsets int64)",
                                                     cxxopts::value<std::string>())(
      "output", "output HDF5 (written to OUTPUT.partial, renamed on success)", cxxopts::value<std::string>())(
      "pp", "pipeline stages", cxxopts::value<int>()->default_value(std::to_string(d.pp)))(
      "tp", "tensor-parallel ranks per stage", cxxopts::value<int>()->default_value(std::to_string(d.tp)))(
      "chunk-size", "tokens per chunk (micro-batch)",
      cxxopts::value<int>()->default_value(std::to_string(d.chunk_size)))(
      "page-size", "tokens per KV-cache page", cxxopts::value<int>()->default_value(std::to_string(d.page_size)))(
      "layer-partition", "layers per stage, e.g. 15,15,15,16 (default: equal, remainder on the last stages)",
      cxxopts::value<std::string>()->default_value(d.layer_partition))(
      "kv-memory-mb", "KV-cache budget per rank in MiB",
      cxxopts::value<int64_t>()->default_value(std::to_string(d.kv_memory_mb)))(
      "backend", "compute backend: cpu", cxxopts::value<std::string>()->default_value(d.backend))(
      "trace", "also write a Chrome trace (Perfetto) to this JSON file",
      cxxopts::value<std::string>()->default_value(""))(
      "ring-depth", "receives posted ahead / sends in flight per rank",
      cxxopts::value<int>()->default_value(std::to_string(d.ring_depth)))(
      "seed", "seed of synthetic:PRESET weights", cxxopts::value<uint64_t>()->default_value(std::to_string(d.seed)))(
      "quiet", "no configuration echo or summary", cxxopts::value<bool>()->default_value("false"));
  auto result = parse(table, argc, argv);
  if (!result) return false;
  const auto& r = *result;
  o.model = required<std::string>(r, "model");
  o.input = required<std::string>(r, "input");
  o.output = required<std::string>(r, "output");
  o.pp = r["pp"].as<int>();
  o.tp = r["tp"].as<int>();
  o.chunk_size = r["chunk-size"].as<int>();
  o.page_size = r["page-size"].as<int>();
  o.layer_partition = r["layer-partition"].as<std::string>();
  o.kv_memory_mb = r["kv-memory-mb"].as<int64_t>();
  o.backend = r["backend"].as<std::string>();
  o.trace = r["trace"].as<std::string>();
  o.ring_depth = r["ring-depth"].as<int>();
  o.seed = r["seed"].as<uint64_t>();
  o.quiet = r["quiet"].as<bool>();
  require_positive(o.pp, "--pp");
  require_positive(o.tp, "--tp");
  require_positive(o.chunk_size, "--chunk-size");
  require_positive(o.page_size, "--page-size");
  require_positive(o.kv_memory_mb, "--kv-memory-mb");
  require_positive(o.ring_depth, "--ring-depth");
  if (o.backend != "cpu")
    throw UserError("--backend " + o.backend + " is not available in this build (available: cpu)");
  if (o.input == o.output) throw UserError("--output must differ from --input");
  return true;
}

bool parse_make_model(int argc, char** argv, MakeModelOptions& o) {
  cxxopts::Options table("pipefill make-model", "Write a seeded random model in Hugging Face layout.");
  const MakeModelOptions d;
  table.add_options()("preset", "tiny, tiny-qwen2, tiny-qwen3, small or llama3-8b", cxxopts::value<std::string>())(
      "out", "directory to create", cxxopts::value<std::string>())(
      "seed", "weight seed", cxxopts::value<uint64_t>()->default_value(std::to_string(d.seed)))(
      "dtype", "stored dtype: f32 or bf16", cxxopts::value<std::string>()->default_value(d.dtype))(
      "max-shard-mb", "largest safetensors file in MiB; bigger models are sharded with an index",
      cxxopts::value<int64_t>()->default_value(std::to_string(d.max_shard_mb)));
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
  table.add_options()("out", "HDF5 file to write", cxxopts::value<std::string>())(
      "num", "number of prompts", cxxopts::value<int>())("min-len", "shortest prompt in tokens",
                                                         cxxopts::value<int64_t>())(
      "max-len", "longest prompt in tokens", cxxopts::value<int64_t>())("vocab", "token ids are drawn from [0, vocab)",
                                                                        cxxopts::value<int>())(
      "seed", "random seed", cxxopts::value<uint64_t>()->default_value("0"));
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
  cxxopts::Options table("pipefill plan", "Print the chunk sizes the chunk policy gives, one per line.");
  const PlanOptions d;
  table.add_options()("length", "prompt length in tokens (repeat for several prompts)",
                      cxxopts::value<std::vector<int64_t>>())(
      "chunk-size", "tokens per chunk", cxxopts::value<int>()->default_value(std::to_string(d.chunk_size)))(
      "json", "print JSON instead", cxxopts::value<bool>()->default_value("false"));
  auto result = parse(table, argc, argv);
  if (!result) return false;
  o.lengths = required<std::vector<int64_t>>(*result, "length");
  o.chunk_size = (*result)["chunk-size"].as<int>();
  o.json = (*result)["json"].as<bool>();
  require_positive(o.chunk_size, "--chunk-size");
  for (int64_t length : o.lengths) require_positive(length, "--length");
  return true;
}

}  // namespace pf::cli
