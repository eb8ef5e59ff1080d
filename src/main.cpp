// pipefill: chunked pipeline-parallel prefill of very long prompts.
//
// `run` is the story of the program and reads top to bottom:
//   MPI init -> options -> topology -> model -> prompts -> weights -> outputs -> plan -> run -> write -> finalize
// Every setup step that can fail on bad input is a checked_step: all ranks learn of a
// failure on any rank, rank 0 prints one `error:` line, and every rank exits with status 2.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>

#include "cli/backend_request.hpp"       // defines: backend_request (placement options -> backend)
#include "cli/commands.hpp"              // defines: profile, plan, make-model, make-prompts subcommands
#include "cli/options.hpp"               // defines: RunOptions and its option table
#include "cli/run_inputs.hpp"            // defines: rank 0's checks and reads before a run, open_output
#include "cli/run_record.hpp"            // defines: placement_identity, output_attributes
#include "compute/cpu/blas_kernels.hpp"  // defines: choose_blas_kernels (OpenBLAS kernels by CPU features)
#include "dist/activation_wire.hpp"      // defines: kActivationWireBytes (float32 on the wire)
#include "dist/checked_step.hpp"         // defines: checked_step (collective user-error agreement)
#include "dist/clock_sync.hpp"           // defines: synchronize_clocks (one time base for the timeline)
#include "dist/collectives.hpp"          // defines: broadcast_bytes, allreduce_sum, barrier
#include "dist/same_everywhere.hpp"      // defines: require_same_as_rank0 (options agree on every rank)
#include "dist/topology.hpp"             // defines: Topology (rank -> stage, tp_rank; communicators)
#include "errors.hpp"                    // defines: UserError, check macros
#include "io/directory_lock.hpp"         // defines: DirectoryLock (one run at a time in --save-kv DIR)
#include "io/prompts_h5.hpp"             // defines: read_prompts (validated HDF5 input)
#include "io/results_h5.hpp"             // defines: ResultWriter (temporary file, renamed on success)
#include "pipeline/backend_setup.hpp"    // defines: make_stage_backend (cpu, cuda or emulate)
#include "pipeline/chunk_planning.hpp"   // defines: decide_plan (fixed or dynamic chunks, profiled or loaded)
#include "pipeline/kv_export_setup.hpp"  // defines: start_kv_export, finish_kv_export (--save-kv)
#include "pipeline/kv_store_setup.hpp"   // defines: KvStoreRun (--kv-store: prefixes across runs)
#include "pipeline/rank_setup.hpp"       // defines: open_rank_model, load_rank_weights, share_prompts
#include "pipeline/stage_loop.hpp"       // defines: run_stage_loop (the per-rank event loop)
#include "pipeline/stage_profiler.hpp"   // defines: profile_capacity_tokens
#include "pipeline/stored_results.hpp"   // defines: StoredResults (rank 0 stores finite results)
#include "sched/cost_profile.hpp"        // defines: CostProfile (a saved --cost-model)
#include "sched/dynamic_chunker.hpp"     // defines: longest_chunk (the workspace a backend reserves)
#include "sched/plan_flops.hpp"          // defines: plan_flops (for the achieved rate)
#include "sched/prefix_sharing.hpp"      // defines: find_shared_prefixes (prefix reuse inside the batch)
#include "trace/chrome_trace.hpp"        // defines: write_chrome_trace
#include "trace/expert_load.hpp"         // defines: gather_expert_load, print_expert_load
#include "trace/op_times.hpp"            // defines: gather_op_times, print_op_times (cpu time by kind of op)
#include "trace/summary.hpp"             // defines: summarize, print_summary
#include "trace/traffic.hpp"             // defines: gather_traffic, print_traffic (bytes vs the seed's formulas)

using namespace pf;

// Set by SIGTERM (Slurm's time limit, scancel) or SIGUSR1 (what mpirun forwards): rank 0
// then stops issuing prompts, finishes those in flight, saves, and exits with kExitStopped.
static volatile int g_stop_requested = 0;
static void request_stop(int) {
  g_stop_requested = 1;
}
constexpr int kExitStopped = 75;  // EX_TEMPFAIL: interrupted, resume me

static int run_command(int argc, char** argv) {
  cli::RunOptions options;
  if (!cli::parse_run(argc, argv, options)) return 0;  // --help; every rank parsed the same argv
  const auto& place = options.placement;
  const auto& chunking = options.chunking;
  const bool emulate = place.backend == compute::BackendKind::kEmulate;
  dist::set_watchdog_timeout(options.watchdog_timeout_s);
  // A heterogeneous launch (`mpirun A : B`) must not run ranks with different options.
  dist::require_same_as_rank0(cli::to_json(options).dump(), "command line", MPI_COMM_WORLD);
  dist::Topology topo = dist::make_topology(place.pp, place.tp);
  const bool writer = topo.is_writer();

  // Model: config.json (or preset), layer partition; for real compute also TP divisibility
  // and every tensor's shape. The emulator only counts FLOPs, so any config.json will do.
  pipeline::RankModel rank_model =
      pipeline::open_rank_model(topo, place.model, place.seed, place.layer_partition, place.expert_split,
                                /*with_weights=*/!emulate);
  const model::ModelShape& shape = rank_model.shape;

  // Prompts: rank 0 checks every path, reads and validates the input, checks every stage's
  // KV capacity and a saved cost model against this placement; every rank learns the lengths.
  io::PromptSet prompts;
  std::optional<sched::CostProfile> saved_costs;
  dist::checked_step(MPI_COMM_WORLD, [&] {
    if (!writer) return;
    cli::check_run_paths(options);
    prompts = cli::read_run_prompts(options, rank_model);
    cli::check_kv_capacity(options, topo, rank_model, prompts);
    saved_costs = cli::load_saved_costs(options, cli::placement_identity(place, topo, rank_model));
  });
  const std::vector<int64_t> lengths = pipeline::share_prompts(topo, prompts, /*last_stage_scores=*/options.logprobs);

  // Backend: the CPU or a GPU (this rank's weights and a KV pool for the longest prompt,
  // with room for profiling when this run profiles) or the emulator (cost-model sleeps).
  pipeline::BackendRequest request =
      cli::backend_request(place, chunking.page_size, sched::longest_chunk(chunking.initial_chunk, chunking.page_size));
  request.cost_source = chunking.cost_source;
  if (chunking.dynamic() && !saved_costs)
    request.profile_room_tokens = pipeline::profile_capacity_tokens(lengths, chunking.initial_chunk);
  pipeline::StageBackend backend = pipeline::make_stage_backend(topo, rank_model, request, lengths);
  // The weights' identity: every value every rank loaded, whatever the layout (what --resume,
  // --save-kv and --kv-store compare, so it is known before any of them opens a file).
  if (!emulate)
    rank_model.weights_fingerprint = pipeline::agree_on_weights_identity(topo, rank_model, backend.weights_digests);

  // Outputs: rank 0 takes the --save-kv directory (one run at a time; it removes what killed
  // runs left there) and opens the output (or finds it complete: --resume has nothing to do).
  std::unique_ptr<io::ResultWriter> results;
  std::unique_ptr<io::DirectoryLock> export_lock;
  int already_complete = 0;
  dist::checked_step(MPI_COMM_WORLD, [&] {
    if (!writer) return;
    if (!options.save_kv.empty()) {
      export_lock =
          std::make_unique<io::DirectoryLock>(options.save_kv, "--save-kv", io::this_run_in_words(options.output));
      if (const int removed = export_lock->remove_partial_files(kv::kv_export_file_patterns());
          removed > 0 && !options.quiet)
        std::printf("note: removed %d unfinished file(s) that killed runs left in %s\n", removed,
                    options.save_kv.c_str());
    }
    results = cli::open_output(options, rank_model, prompts);
    already_complete = !results;
  });
  dist::broadcast_int(already_complete, 0, MPI_COMM_WORLD);
  if (already_complete) {
    if (writer) std::printf("%s is already complete: nothing to resume\n", options.output.c_str());
    if (writer && !options.save_kv.empty())
      std::printf(
          "note: nothing was computed, so nothing was exported to %s (the run that computes a prompt "
          "exports it: run again to a new --output)\n",
          options.save_kv.c_str());
    dist::free_topology(topo);
    return 0;
  }
  // KV export (--save-kv): a writer per rank; a resumed run recomputes finished prompts whose
  // export is missing on some rank.
  std::unique_ptr<kv::KvExporter> kv_export;
  if (!options.save_kv.empty())
    kv_export =
        pipeline::start_kv_export(topo, rank_model, options.save_kv, options.kv_dtype, prompts, lengths, results.get());

  // Plan: prompts that share a prefix back to back, the prefix computed once (rank 0 finds
  // them), cut into fixed chunks, or dynamic ones from cost models (profiled now or loaded).
  const std::vector<char> done = results ? results->completed() : std::vector<char>();
  sched::PrefixPlan prefixes =
      writer && !options.no_prefix_cache
          ? sched::find_shared_prefixes(prompts.tokens, prompts.offsets, chunking.page_size, done)
          : sched::PrefixPlan{};
  // --kv-store: a prompt loads a longer prefix an earlier run stored, unless the run wants what
  // the store does not keep (every position's scores, the mean hidden state).
  std::unique_ptr<pipeline::KvStoreRun> kv_store;
  if (!options.kv_store.empty()) {
    const bool load = !options.no_prefix_cache && !options.token_rows_wanted() &&
                      options.hidden_states != compute::HiddenStatesKind::kMean;
    if (writer && !load && !options.no_prefix_cache)
      std::printf(
          "note: --kv-store lends no prefixes to a run with --logprobs, --top-k or --hidden-states mean "
          "(it keeps KV, not the prefix's scores); this run's prompts are added to it\n");
    kv_store = std::make_unique<pipeline::KvStoreRun>(topo, rank_model, options.kv_store, prompts, lengths, done,
                                                      chunking.page_size, load, place.backend, place.dtype);
    if (writer) sched::prefer_longer_outside(prefixes, kv_store->offers());
  }
  const pipeline::PlanDecision decision =
      pipeline::decide_plan(topo, chunking, lengths, *backend.compute, shape.hidden_size, saved_costs, done, prefixes);
  const sched::BatchPlan& plan = decision.plan;
  if (writer && !options.quiet) {
    std::printf(
        "pipefill %s | %s %s (%.1fM active params) | pp %d x tp %d | layers %s | chunk %d (%s) | page %d | %s\n",
        PIPEFILL_VERSION, place.model.c_str(), shape.name.c_str(), shape.active_parameters() / 1e6, topo.pp, topo.tp,
        model::partition_text(rank_model.partition).c_str(), chunking.initial_chunk, decision.policy_used.c_str(),
        chunking.page_size, backend.description.c_str());
    if (!backend.detail.empty()) std::printf("%s: %s\n", backend.description.c_str(), backend.detail.c_str());
    std::printf("input %s: %d prompts%s, %lld tokens to compute%s, %zu micro-batches\n", options.input.c_str(),
                plan.num_prompts(),
                results->resumed()
                    ? (" (" + std::to_string(results->completed_count()) + " done before, resumed)").c_str()
                    : "",
                static_cast<long long>(plan.total_tokens()),
                plan.reused_tokens() > 0
                    ? (" (" + std::to_string(plan.reused_tokens()) + " more reused from shared prefixes)").c_str()
                    : "",
                plan.micro_batches.size());
    if (shape.mla())
      std::printf(
          "kv cache: latent attention keeps %.0f values a token a layer for all %d heads (kv_lora_rank %d + "
          "rope %d), %.1fx less than their own K and V (%.0f)\n",
          shape.cached_values_per_token(), shape.num_heads, shape.kv_lora_rank, shape.qk_rope_head_dim,
          shape.full_kv_values_per_token() / shape.cached_values_per_token(), shape.full_kv_values_per_token());
    std::fflush(stdout);
  }

  // Transport of hidden states between stages (host MPI, or device buffers over NCCL).
  const std::unique_ptr<dist::Transport> transport =
      backend.make_transport(static_cast<size_t>(plan.max_chunk()) * shape.hidden_size);

  // Run: one time base, then every rank walks the plan.
  const dist::RunClock clock = dist::synchronize_clocks(MPI_COMM_WORLD);
  trace::Timeline timeline(topo, clock);
  pipeline::ProgressReporter progress(options.quiet ? 0 : options.progress_interval_s, plan.total_tokens(),
                                      plan.num_prompts());
  if (writer) progress.set_work(plan, shape, topo.pp, &decision.fits, /*announce=*/!options.quiet);
  // Rank 0 stores every finite result as it arrives; the rest is reported below.
  const int hidden_width = options.hidden_states == compute::HiddenStatesKind::kNone ? 0 : shape.hidden_size;
  std::optional<pipeline::StoredResults> stored;
  if (writer) stored.emplace(*results, shape.vocab_size, hidden_width, plan);
  pipeline::StageLoopContext loop{topo, plan, prompts, *backend.compute, *transport, timeline};
  loop.hidden_size = shape.hidden_size;
  loop.vocab_size = shape.vocab_size;
  loop.ring_depth = options.ring_depth;
  loop.sink = writer ? &*stored : nullptr;
  loop.hidden_states = options.hidden_states;
  loop.token_rows = {options.logprobs, options.top_k};
  loop.kv_export = kv_export.get();
  loop.kv_store = kv_store.get();
  loop.progress = writer ? &progress : nullptr;
  loop.stop_requested = &g_stop_requested;
  loop.all_reduce = backend.all_reduce.get();
  const pipeline::LoopResult loop_result = pipeline::run_stage_loop(loop);
  const trace::TrafficCounters& traffic = loop_result.traffic;
  {
    dist::WaitLabel label("the end-of-run barrier (another rank is still in its loop)");
    dist::barrier(MPI_COMM_WORLD);
  }
  const double wall_s = clock.now();
  // Every rank's KV files written (or failed), then rank 0 lists them in DIR/index.json.
  std::optional<std::string> kv_export_error =
      kv_export ? pipeline::finish_kv_export(topo, rank_model, options.save_kv, *kv_export, results.get())
                : std::nullopt;
  // --kv-store: every prompt all ranks finished becomes an entry.
  if (kv_store) {
    const std::optional<std::string> store_error = kv_store->finish(prompts);
    if (!kv_export_error) kv_export_error = store_error;
  }
  const std::vector<int> nonfinite_prompts = writer ? stored->nonfinite_prompts() : std::vector<int>();
  int nonfinite_count = static_cast<int>(nonfinite_prompts.size());
  dist::broadcast_int(nonfinite_count, 0, MPI_COMM_WORLD);

  // Write: timeline and traffic gathered to rank 0, summary, output renamed into place.
  const auto events = trace::gather_timeline(timeline, MPI_COMM_WORLD);
  trace::TrafficReport traffic_report = trace::gather_traffic(
      topo, plan, shape.hidden_size, shape.hidden_size * dist::kActivationWireBytes, rank_model.partition, traffic);
  traffic_report.allreduce_modelled = emulate;
  const trace::ExpertLoad expert_load =
      trace::gather_expert_load(topo, backend.compute->expert_rows(), emulate ? 0 : shape.experts);
  const compute::OpTimes op_times = trace::gather_op_times(backend.compute->op_times());
  if (writer) {
    const trace::RunSummary summary =
        trace::summarize(plan, events, topo.pp, topo.tp, wall_s, sched::plan_flops(shape, plan));
    const bool complete =
        results->finish(events, cli::output_attributes(options, rank_model, decision, backend.description, wall_s));
    if (!options.trace.empty()) trace::write_chrome_trace(options.trace, events, topo.pp, topo.tp);
    if (!options.quiet) {
      trace::print_summary(summary, stdout);
      trace::print_traffic(traffic_report, stdout);
      trace::print_expert_load(expert_load, stdout);
      trace::print_op_times(op_times, stdout);
      if (results->scored_tokens() > 0)
        std::printf(
            "log-probs: %lld tokens scored this run, perplexity %.4g (exp of their mean NLL; per prompt in "
            "/perplexity)\n",
            static_cast<long long>(results->scored_tokens()),
            std::exp(results->scored_nll_sum() / static_cast<double>(results->scored_tokens())));
    }
    if (complete) {
      std::printf("wrote %s%s%s\n", options.output.c_str(), options.trace.empty() ? "" : " and ",
                  options.trace.c_str());
    } else if (nonfinite_count > 0) {
      std::string which;
      for (size_t i = 0; i < nonfinite_prompts.size() && i < 8; ++i)
        which += (i ? ", " : "") + std::to_string(nonfinite_prompts[i]);
      std::fprintf(stderr,
                   "error: the results of %d prompt(s) are not finite (NaN or Inf): prompt %s%s; they were not "
                   "stored (do the weights or the config make NaN? see the warnings above). %d prompt(s) are in "
                   "%s.partial\n",
                   nonfinite_count, which.c_str(), nonfinite_count > 8 ? ", ..." : "", results->completed_count(),
                   options.output.c_str());
    } else {
      std::printf("stopped: %d of %d prompts are in %s.partial; run again with --resume to finish\n",
                  results->completed_count(), plan.num_prompts(), options.output.c_str());
    }
  }
  // A failed KV export leaves the other outputs as they are (complete, or resumable).
  if (kv_export_error && writer) std::fprintf(stderr, "error: %s\n", kv_export_error->c_str());
  dist::free_topology(topo);
  if (nonfinite_count > 0 || kv_export_error) return kExitUserError;
  return loop_result.stopped ? kExitStopped : 0;
}

int main(int argc, char** argv) {
  // Before anything else (MPI, threads): OpenBLAS's kernels by this CPU's features, not its model.
  pf::cpu::choose_blas_kernels(argv);
  const char* command = argc > 1 ? argv[1] : "";
  // run and profile are SPMD (MPI); the other commands are single-process tools.
  const bool is_run = std::strcmp(command, "run") == 0 || std::strcmp(command, "profile") == 0;
  int rank = 0;
  if (std::strcmp(command, "run") == 0) {
    // First thing: a stop that arrives during start-up (MPI_Init, loading the weights) is
    // remembered, and the run ends with nothing computed (exit 75) instead of dying.
    std::signal(SIGTERM, request_stop);
    std::signal(SIGUSR1, request_stop);
  }
  if (is_run) {
    MPI_CHECK(MPI_Init(&argc, &argv));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  }
  int status = 0;
  try {
    if (std::strcmp(command, "run") == 0) {
      status = run_command(argc - 1, argv + 1);
    } else if (std::strcmp(command, "profile") == 0) {
      status = cli::profile_command(argc - 1, argv + 1);
    } else if (std::strcmp(command, "make-model") == 0) {
      status = cli::make_model_command(argc - 1, argv + 1);
    } else if (std::strcmp(command, "make-prompts") == 0) {
      status = cli::make_prompts_command(argc - 1, argv + 1);
    } else if (std::strcmp(command, "simulate") == 0) {
      status = cli::simulate_command(argc - 1, argv + 1);
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
