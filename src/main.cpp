// pipefill: chunked pipeline-parallel prefill of very long prompts.
//
// `run` is the story of the program and reads top to bottom:
//   MPI init -> options -> topology -> model -> prompts & plan -> weights -> run -> write -> finalize
// Every setup step that can fail on bad input is a checked_step: all ranks learn of a
// failure on any rank, rank 0 prints one `error:` line, and every rank exits with status 2.
#include <mpi.h>

#include <cstdio>
#include <cstring>

#include "cli/commands.hpp"           // defines: make-model, make-prompts, plan subcommands
#include "cli/options.hpp"            // defines: RunOptions and its option table
#include "compute/flops.hpp"          // defines: plan_flops (for the achieved rate)
#include "compute/stage_forward.hpp"  // defines: CpuStageCompute (a stage's layers on a chunk)
#include "dist/checked_step.hpp"      // defines: checked_step (collective user-error agreement)
#include "dist/clock_sync.hpp"        // defines: synchronize_clocks (one time base for the timeline)
#include "dist/collectives.hpp"       // defines: broadcast_bytes, allreduce_sum, barrier
#include "dist/topology.hpp"          // defines: Topology (rank -> stage, tp_rank; communicators)
#include "errors.hpp"                 // defines: UserError, check macros
#include "io/prompts_h5.hpp"          // defines: read_prompts (validated HDF5 input)
#include "io/results_h5.hpp"          // defines: ResultWriter (temporary file, renamed on success)
#include "kvcache/kv_capacity.hpp"    // defines: pool_pages_for (capacity check before compute)
#include "model/model_source.hpp"     // defines: open_model (checkpoint dir or synthetic preset)
#include "model/weights.hpp"          // defines: load_stage_weights, ShardSpec
#include "pipeline/stage_loop.hpp"    // defines: run_stage_loop (the per-rank event loop)
#include "sched/batch_plan.hpp"       // defines: BatchPlan, FixedChunkPolicy
#include "trace/chrome_trace.hpp"     // defines: write_chrome_trace
#include "trace/summary.hpp"          // defines: summarize, print_summary

using namespace pf;

static int run_command(int argc, char** argv) {
  cli::RunOptions options;
  if (!cli::parse_run(argc, argv, options)) return 0;  // --help; every rank parsed the same argv
  dist::Topology topo = dist::make_topology(options.pp, options.tp);
  const bool writer = topo.is_writer();

  // Model: config.json (or preset), layer partition, TP divisibility. Rank 0 also checks
  // every tensor's shape in the checkpoint headers before anyone loads data.
  model::ModelSource model;
  std::vector<model::StageRange> partition;
  dist::checked_step(MPI_COMM_WORLD, [&] {
    model = model::open_model(options.model, options.seed);
    partition = options.layer_partition.empty()
                    ? model::default_partition(model.config.num_layers, topo.pp)
                    : model::parse_partition(options.layer_partition, model.config.num_layers, topo.pp);
    model::validate_tensor_parallel(model.config, topo.tp);
    if (writer && !model.synthetic) model::validate_tensors(model.config, *model.tensors, options.model);
  });
  const model::ModelConfig& config = model.config;
  const model::ShardSpec shard = model::make_shard_spec(config, topo.tp, topo.tp_rank);
  const auto kv_shape_of = [&](int stage) {
    return kv::KvShape{partition[stage].count, shard.kv_heads, config.head_dim, options.page_size};
  };

  // Prompts and plan: rank 0 reads and validates the input, checks every stage's KV
  // capacity and opens the output, then broadcasts the plan; stage 0 gets the tokens.
  io::PromptSet prompts;
  sched::BatchPlan plan;
  std::unique_ptr<io::ResultWriter> results;
  dist::checked_step(MPI_COMM_WORLD, [&] {
    if (!writer) return;
    prompts = io::read_prompts(options.input, config.vocab_size);
    plan = sched::make_plan(prompts.lengths(), sched::FixedChunkPolicy(options.chunk_size));
    for (int stage = 0; stage < topo.pp; ++stage)
      kv::pool_pages_for(kv_shape_of(stage), plan.prompt_lengths, options.kv_memory_mb, stage);
    results = std::make_unique<io::ResultWriter>(options.output, plan.num_prompts(), config.vocab_size);
  });
  std::vector<char> plan_bytes = writer ? sched::serialize(plan) : std::vector<char>();
  dist::broadcast_bytes(plan_bytes, 0, MPI_COMM_WORLD);
  plan = sched::deserialize(plan_bytes);
  if (topo.first_stage()) {
    std::vector<char> token_bytes(prompts.tokens.size() * sizeof(int32_t));
    std::memcpy(token_bytes.data(), prompts.tokens.data(), token_bytes.size());
    dist::broadcast_bytes(token_bytes, 0, topo.tp_comm);
    prompts.tokens.resize(token_bytes.size() / sizeof(int32_t));
    std::memcpy(prompts.tokens.data(), token_bytes.data(), token_bytes.size());
    prompts.offsets.assign(1, 0);
    for (int64_t length : plan.prompt_lengths) prompts.offsets.push_back(prompts.offsets.back() + length);
  }

  if (writer && !options.quiet) {
    std::printf("pipefill %s | %s %s (%.1fM params) | pp %d x tp %d | layers %s | chunk %d | page %d\n",
                PIPEFILL_VERSION, options.model.c_str(), config.architecture_name.c_str(),
                config.total_parameters() / 1e6, topo.pp, topo.tp, model::partition_text(partition).c_str(),
                options.chunk_size, options.page_size);
    std::printf("input %s: %d prompts, %lld tokens, %zu micro-batches\n", options.input.c_str(), plan.num_prompts(),
                static_cast<long long>(plan.total_tokens()), plan.micro_batches.size());
    std::fflush(stdout);
  }

  // Weights: each rank reads its own layers and TP shard only.
  model::StageWeights weights;
  dist::checked_step(MPI_COMM_WORLD, [&] {
    weights = model::load_stage_weights(config, *model.tensors, partition[topo.stage], topo.first_stage(),
                                        topo.last_stage(), shard);
  });
  const kv::KvShape kv_shape = kv_shape_of(topo.stage);
  kv::PagedKvPool kv_pool(kv_shape,
                          kv::pool_pages_for(kv_shape, plan.prompt_lengths, options.kv_memory_mb, topo.stage));

  // Run: one time base, then every rank walks the plan.
  const dist::RunClock clock = dist::synchronize_clocks(MPI_COMM_WORLD);
  trace::Timeline timeline(topo, clock);
  compute::CpuStageCompute compute(config, shard, std::move(weights), kv_pool);
  pipeline::StageLoopContext loop{topo,
                                  config,
                                  plan,
                                  prompts,
                                  compute,
                                  kv_pool,
                                  timeline,
                                  options.ring_depth,
                                  [&](int prompt, const float* logits) { results->write_logits(prompt, logits); }};
  pipeline::run_stage_loop(loop);
  dist::barrier(MPI_COMM_WORLD);
  const double wall_s = clock.now();

  // Write: timeline gathered to rank 0, summary, output renamed into place.
  const auto events = trace::gather_timeline(timeline, MPI_COMM_WORLD);
  if (writer) {
    const trace::RunSummary summary =
        trace::summarize(plan, events, topo.pp, topo.tp, wall_s, compute::plan_flops(config, plan));
    nlohmann::json attributes = cli::to_json(options);
    attributes["version"] = PIPEFILL_VERSION;
    attributes["model_config"] = model::to_json(config).dump();
    attributes["layer_partition_used"] = model::partition_text(partition);
    attributes["wall_s"] = wall_s;
    results->finish(summary.ttft_s, events, attributes);
    if (!options.trace.empty()) trace::write_chrome_trace(options.trace, events, topo.pp, topo.tp);
    if (!options.quiet) {
      trace::print_summary(summary, stdout);
      std::printf("wrote %s%s%s\n", options.output.c_str(), options.trace.empty() ? "" : " and ",
                  options.trace.c_str());
    }
  }
  dist::free_topology(topo);
  return 0;
}

int main(int argc, char** argv) {
  const char* command = argc > 1 ? argv[1] : "";
  const bool is_run = std::strcmp(command, "run") == 0;
  int rank = 0;
  if (is_run) {
    MPI_CHECK(MPI_Init(&argc, &argv));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  }
  int status = 0;
  try {
    if (is_run) {
      status = run_command(argc - 1, argv + 1);
    } else if (std::strcmp(command, "make-model") == 0) {
      status = cli::make_model_command(argc - 1, argv + 1);
    } else if (std::strcmp(command, "make-prompts") == 0) {
      status = cli::make_prompts_command(argc - 1, argv + 1);
    } else if (std::strcmp(command, "plan") == 0) {
      status = cli::plan_command(argc - 1, argv + 1);
    } else if (!*command || std::strcmp(command, "--help") == 0 || std::strcmp(command, "-h") == 0) {
      std::printf("%s", cli::usage().c_str());
    } else if (std::strcmp(command, "--version") == 0) {
      std::printf("pipefill %s\n", PIPEFILL_VERSION);
    } else {
      throw UserError(std::string("unknown command \"") + command + "\"\n" + cli::usage());
    }
  } catch (const UserError& e) {
    if (rank == 0) std::fprintf(stderr, "error: %s\n", e.what());
    status = kExitUserError;
  } catch (const std::exception& e) {  // a bug or a system fault: say where, take the job down
    fail_library_call("pipefill", command, e.what(), __FILE__, __LINE__);
  }
  if (is_run) MPI_Finalize();
  return status;
}
