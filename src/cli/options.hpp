// Command-line options of every subcommand. All defaults live in the option tables in
// options.cpp; help text is generated from the same tables (cxxopts).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace pf::cli {

struct RunOptions {
  std::string model;  // directory, or synthetic:PRESET
  std::string input;
  std::string output;
  int pp = 1;
  int tp = 1;
  int chunk_size = 4096;
  int page_size = 64;
  std::string layer_partition;  // empty: SGLang default
  int64_t kv_memory_mb = 8192;  // KV pool budget per rank
  std::string backend = "cpu";
  std::string trace;  // Chrome trace path, empty: none
  int ring_depth = 4;
  uint64_t seed = 0;  // synthetic weights
  bool quiet = false;
};
nlohmann::json to_json(const RunOptions& options);

struct MakeModelOptions {
  std::string preset;
  std::string out;
  uint64_t seed = 0;
  std::string dtype = "f32";
  int64_t max_shard_mb = 4096;
};

struct MakePromptsOptions {
  std::string out;
  int num = 0;
  int64_t min_len = 0;
  int64_t max_len = 0;
  int vocab = 0;
  uint64_t seed = 0;
};

struct PlanOptions {
  std::vector<int64_t> lengths;
  int chunk_size = 4096;
  bool json = false;
};

// Each parser throws UserError for unknown flags, bad values and missing required options.
// They return false when --help was asked for (the help text is already printed).
bool parse_run(int argc, char** argv, RunOptions& options);
bool parse_make_model(int argc, char** argv, MakeModelOptions& options);
bool parse_make_prompts(int argc, char** argv, MakePromptsOptions& options);
bool parse_plan(int argc, char** argv, PlanOptions& options);

std::string usage();  // the top-level help: subcommands and what they do

}  // namespace pf::cli
