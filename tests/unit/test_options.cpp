// The option tables' generated JSON against the keys and values written out by hand: outputs
// and cost profiles written before must still match on --resume and --cost-model, so the
// echoed configuration and the identities may not drift when an option is added or moved.
// Also the rules between options that the tables encode (policy defaults, aliases).
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "cli/options.hpp"
#include "cli/quantities.hpp"
#include "errors.hpp"
#include "pipeline/checkpoint_run.hpp"

using namespace pf;

namespace {

// `run` with the required flags and then `flags` (split at spaces).
bool try_parse_run(const std::string& flags, cli::RunOptions& options) {
  std::vector<std::string> args = {"run", "--model", "m", "--input", "in.h5", "--output", "out.h5"};
  std::istringstream words(flags);
  for (std::string word; words >> word;) args.push_back(word);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return cli::parse_run(static_cast<int>(argv.size()), argv.data(), options);
}

cli::RunOptions parse_run(const std::string& flags) {
  cli::RunOptions options;
  EXPECT_TRUE(try_parse_run(flags, options));
  return options;
}

}  // namespace

TEST(RunOptions, EchoedConfigurationHasEveryKeyWithItsValue) {
  unsetenv("SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR");  // the smooth factor's own default
  const cli::RunOptions o = parse_run(
      "--seed 7 --pp 2 --tp 2 --layer-partition 3,5 --backend emulate --cost-model analytic:h20 --chunk-size 256 "
      "--chunk-policy pipefill --trace t.json --ring-depth 3 --resume");
  const nlohmann::json expected = {{"model", "m"},
                                   {"seed", 7},
                                   {"pp", 2},
                                   {"tp", 2},
                                   {"layer_partition", "3,5"},
                                   {"kv_memory_mb", 8192},
                                   {"threads", 0},
                                   {"backend", "emulate"},
                                   {"transport", "nccl"},
                                   {"kv_dtype", "f32"},
                                   {"kv_memory_fraction", 0.85},
                                   {"input", "in.h5"},
                                   {"output", "out.h5"},
                                   {"chunk_size", 256},
                                   {"page_size", 64},
                                   {"chunk_policy", "pipefill"},
                                   {"smooth_factor", 0.75},
                                   {"cost_form", "prefix"},
                                   {"profile_stages", "all"},
                                   {"fold_tail", true},
                                   {"profile_points", 16},
                                   {"cost_model", "analytic:h20"},
                                   {"expert_split", "width"},
                                   {"dtype", "f32"},
                                   {"trace", "t.json"},
                                   {"cp", 1},
                                   {"cp_attention", "auto"},
                                   {"ring_depth", 3},
                                   {"watchdog_timeout_s", 1800.0},
                                   {"allow_long_prompts", false},
                                   {"resume", true},
                                   {"hidden_states", "none"},
                                   {"logprobs", false},
                                   {"top_k", 0},
                                   {"token_ids", ""},
                                   {"save_kv", ""},
                                   {"kv_store", ""},
                                   {"kv_store_limit", ""},
                                   {"no_prefix_cache", false},
                                   {"checkpoint_every", ""},
                                   {"mtbf", "24h"}};
  EXPECT_EQ(cli::to_json(o), expected);
}

TEST(RunOptions, IdentitiesHoldTheirOptionsOnly) {
  const cli::RunOptions o = parse_run("--pp 2 --dynamic-chunking --smooth-factor 0.5 --cost-model cost.json --quiet");
  // Not the layout (pp, tp, the partition): any layout resumes any output.
  const nlohmann::json run = {
      {"model", "m"},       {"seed", 0},       {"backend", "cpu"},         {"input", "in.h5"},
      {"chunk_size", 4096}, {"page_size", 64}, {"chunk_policy", "sglang"}, {"smooth_factor", 0.5}};
  EXPECT_EQ(cli::run_identity_options(o), run);
  EXPECT_EQ(cli::placement_identity_options(o.placement), (nlohmann::json{{"backend", "cpu"}}));
  EXPECT_EQ(cli::to_json(o)["cost_model"], "cost.json");
  EXPECT_TRUE(o.chunking.cost_source.profile_file());
  EXPECT_EQ(o.chunking.cost_source.value, "cost.json");
  EXPECT_TRUE(o.quiet);
  // --hidden-states, added after outputs were written, is in the identity only when given: a
  // partial written before it existed still resumes without it, and not with it.
  nlohmann::json with_hidden = run;
  with_hidden["hidden_states"] = "mean";
  EXPECT_EQ(cli::run_identity_options(parse_run("--pp 2 --dynamic-chunking --smooth-factor 0.5 --cost-model "
                                                "cost.json --hidden-states mean")),
            with_hidden);
  // So are --logprobs and --top-k (added later still).
  nlohmann::json with_scores = run;
  with_scores["logprobs"] = true;
  with_scores["top_k"] = 5;
  EXPECT_EQ(cli::run_identity_options(parse_run("--pp 2 --dynamic-chunking --smooth-factor 0.5 --cost-model "
                                                "cost.json --logprobs --top-k 5")),
            with_scores);
}

TEST(RunOptions, TokenScoresNeedTheCpuBackend) {
  EXPECT_FALSE(parse_run("").logprobs);
  EXPECT_EQ(parse_run("").top_k, 0);
  EXPECT_TRUE(parse_run("--logprobs --top-k 3").logprobs);
  EXPECT_EQ(parse_run("--top-k 3").top_k, 3);
  cli::RunOptions unused;
  EXPECT_THROW(try_parse_run("--top-k -1", unused), UserError);
  EXPECT_THROW(try_parse_run("--backend emulate --cost-model analytic:h20 --logprobs", unused), UserError);
  EXPECT_THROW(try_parse_run("--backend emulate --cost-model analytic:h20 --top-k 2", unused), UserError);
}

// A job script's default and the user's own value for the same flag: refused with both, never
// the last taken silently (cxxopts' own rule); aliases of one setting are separate flags.
TEST(RunOptions, AFlagGivenTwiceIsRefusedWithBothValues) {
  cli::RunOptions unused;
  try {
    try_parse_run("--chunk-size 4096 --pp 2 --chunk-size=8192", unused);
    FAIL() << "a repeated --chunk-size was accepted";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "--chunk-size given twice (\"4096\" and \"8192\"): give it once (see --help)");
  }
  EXPECT_THROW(try_parse_run("--model other", unused), UserError);  // try_parse_run gives --model already
  EXPECT_THROW(try_parse_run("--logprobs --logprobs", unused), UserError);
  EXPECT_THROW(try_parse_run("--pp 2 --pp 2", unused), UserError);  // even the same value: a script's mistake
  EXPECT_TRUE(try_parse_run("--dynamic-chunking --enable-dynamic-chunking", unused));
}

TEST(RunOptions, HiddenStatesAreParsedOnceAndNeedRealCompute) {
  EXPECT_EQ(parse_run("").hidden_states, compute::HiddenStatesKind::kNone);
  EXPECT_EQ(parse_run("--hidden-states last").hidden_states, compute::HiddenStatesKind::kLast);
  EXPECT_EQ(parse_run("--hidden-states mean").hidden_states, compute::HiddenStatesKind::kMean);
  cli::RunOptions unused;
  EXPECT_THROW(try_parse_run("--hidden-states foo", unused), UserError);
  EXPECT_THROW(try_parse_run("--backend emulate --cost-model analytic:h20 --hidden-states last", unused), UserError);
}

TEST(RunOptions, PolicyDecidesTheDefaultsItDoesNotOverride) {
  cli::RunOptions o = parse_run("--chunk-policy pipefill --cost-form sglang");
  EXPECT_EQ(o.chunking.cost_form, sched::CostForm::kFreshQuadratic);  // given: kept
  EXPECT_TRUE(o.chunking.all_stages);
  EXPECT_TRUE(o.chunking.fold_tail);
  o = parse_run("--chunk-policy pipefill --fold-tail=false --profile-stages first");
  EXPECT_TRUE(o.chunking.fold_tail);  // pipefill always folds
  EXPECT_FALSE(o.chunking.all_stages);
  o = parse_run("--enable-dynamic-chunking --pp 3");
  EXPECT_EQ(o.chunking.policy, sched::ChunkPolicyKind::kSglang);
  EXPECT_EQ(o.chunking.cost_form, sched::CostForm::kFreshQuadratic);
  EXPECT_FALSE(o.chunking.fold_tail);
  EXPECT_EQ(o.chunking.stages, 3);
  o = parse_run("--dynamic-chunking --chunk-policy pipefill");
  EXPECT_EQ(o.chunking.policy, sched::ChunkPolicyKind::kPipefill);  // an explicit dynamic policy wins
  try {                                                             // and fixed contradicts it
    parse_run("--dynamic-chunking --chunk-policy fixed");
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--chunk-policy fixed for fixed ones: give one"), std::string::npos);
  }
}

TEST(RunOptions, BackendAndCostModelAreParsedOnce) {
  const cli::RunOptions o = parse_run("--backend emulate --cost-model analytic:h20");
  EXPECT_EQ(o.placement.backend, compute::BackendKind::kEmulate);
  EXPECT_TRUE(o.chunking.cost_source.analytic());
  EXPECT_EQ(o.chunking.cost_source.value, "h20");
  EXPECT_EQ(parse_run("").placement.backend, compute::BackendKind::kCpu);
  EXPECT_TRUE(parse_run("").chunking.cost_source.none());
  cli::RunOptions unused;
  EXPECT_THROW(try_parse_run("--backend tpu", unused), UserError);
}

namespace pf::cli {
namespace {

TEST(Durations, ReadAsPeopleWriteThem) {
  EXPECT_EQ(parse_duration("--x", "90s"), 90);
  EXPECT_EQ(parse_duration("--x", "90"), 90);
  EXPECT_EQ(parse_duration("--x", "10m"), 600);
  EXPECT_EQ(parse_duration("--x", "1.5h"), 5400);
  EXPECT_EQ(parse_duration("--x", "2d"), 172800);
  EXPECT_EQ(parse_duration("--x", "0.25s"), 0.25);
  for (const char* bad : {"", "s", "10x", "-5m", "0", "nan", "1e400s", "10 m"})
    EXPECT_THROW(parse_duration("--x", bad), UserError) << bad;
}

TEST(Durations, CheckpointOptionsAreCheckedAtParse) {
  auto parse = [](std::vector<std::string> extra) {
    std::vector<std::string> args = {"run", "--model", "m", "--input", "in.h5", "--output", "out.h5"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    RunOptions o;
    parse_run(static_cast<int>(argv.size()), argv.data(), o);
    return o;
  };
  EXPECT_EQ(parse({"--checkpoint-every", "10m"}).checkpoint_interval_s, 600);
  EXPECT_EQ(parse({"--checkpoint-every", "auto"}).checkpoint_interval_s, -1);
  EXPECT_EQ(parse({"--checkpoint-every", "auto", "--mtbf", "2h"}).mtbf_s, 7200);
  EXPECT_EQ(parse({}).checkpoint_interval_s, 0);
  EXPECT_THROW(parse({"--checkpoint-every", "often"}), UserError);
  EXPECT_THROW(parse({"--mtbf", "2h"}), UserError);  // without --checkpoint-every auto it means nothing
}

}  // namespace
}  // namespace pf::cli

namespace pf::pipeline {
namespace {

// sqrt(2 C M): 0.05 s checkpoints on nodes failing once a day together: every 93 s.
TEST(Checkpoints, YoungDalyInterval) {
  EXPECT_NEAR(young_daly_interval(0.05, 86400), 92.95, 0.01);
  EXPECT_NEAR(young_daly_interval(2.0, 3600), 120.0, 1e-9);
  EXPECT_GT(young_daly_interval(0, 86400), 0);  // a free checkpoint still has an interval
}

}  // namespace
}  // namespace pf::pipeline

namespace pf::cli {
namespace {

TEST(Sizes, ReadAsPeopleWriteThem) {
  EXPECT_EQ(parse_size("--x", "1024"), 1024u);
  EXPECT_EQ(parse_size("--x", "2K"), 2048u);
  EXPECT_EQ(parse_size("--x", "800M"), 800ull << 20);
  EXPECT_EQ(parse_size("--x", "500G"), 500ull << 30);
  EXPECT_EQ(parse_size("--x", "500GB"), 500ull << 30);
  EXPECT_EQ(parse_size("--x", "1.5TiB"), 3ull << 39);
  EXPECT_EQ(parse_size("--x", "5g"), 5ull << 30);  // either case
  EXPECT_EQ(parse_size("--x", "2kB"), 2048u);
  // A fraction of a byte is a mistake (1.5 without a unit was 1 byte).
  for (const char* bad : {"", "G", "0", "-1G", "10X", "1e30T", "5 G", "1.5"})
    EXPECT_THROW(parse_size("--x", bad), UserError) << bad;
}

}  // namespace
}  // namespace pf::cli
