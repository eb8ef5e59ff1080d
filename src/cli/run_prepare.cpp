// prepare_run: every collective of `pipefill run` up to the plan (see run_steps.hpp).
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "cli/backend_request.hpp"
#include "cli/run_inputs.hpp"
#include "cli/run_record.hpp"
#include "cli/run_steps.hpp"
#include "compute/backend_capabilities.hpp"
#include "dist/checked_step.hpp"
#include "dist/collectives.hpp"
#include "dist/same_everywhere.hpp"
#include "io/stored_output.hpp"
#include "pipeline/kv_export_setup.hpp"
#include "pipeline/stage_profiler.hpp"
#include "sched/cost_profile.hpp"
#include "sched/dynamic_chunker.hpp"
#include "sched/hidden_slots.hpp"
#include "sched/prefix_sharing.hpp"

namespace pf::cli {
namespace {

// Rank 0 checks every path, reads and validates the input (and the --token-ids set), places
// the layers (by the prompts, or as a saved cost model did: pipeline::run_partition), checks
// every stage's KV capacity and the cost model against this placement; every rank learns the
// partition, the lengths and the set (read once: a file that differs between nodes cannot
// split them).
std::optional<sched::CostProfile> read_inputs(PreparedRun& run) {
  const RunOptions& options = run.options;
  std::optional<sched::CostProfile> saved_costs;
  dist::checked_step(MPI_COMM_WORLD, [&] {
    if (!run.topo.is_writer()) return;
    check_run_paths(options);
    run.options.token_set = read_token_set(options, run.rank_model);
    run.prompts = read_run_prompts(options, run.rank_model);
    const std::optional<sched::CostProfile> profile = load_saved_costs(options);
    run.rank_model.partition = pipeline::run_partition(run.rank_model, run.topo.pp, run.prompts.lengths(),
                                                       scored_positions(run.options, run.prompts),
                                                       profile ? profile->layer_partition() : std::string());
    check_kv_capacity(options, run.topo, run.rank_model, run.prompts);
    if (profile && options.chunking.dynamic()) {  // fixed chunks have no use for it (the emulator's costs aside)
      match_saved_costs(options, *profile, placement_identity(options.placement, run.topo, run.rank_model));
      saved_costs = profile;
    }
  });
  pipeline::settle_partition(run.topo, run.rank_model, run.rank_model.partition);
  if (!options.token_ids.empty()) dist::broadcast_vector(run.options.token_set, MPI_COMM_WORLD);
  run.lengths = pipeline::share_prompts(run.topo, run.prompts, /*last_stage_scores=*/options.logprobs);
  return saved_costs;
}

// The CPU or a GPU (this rank's weights and a KV pool for the longest prompt, with room for
// profiling when this run profiles) or the emulator (cost-model sleeps); then the weights'
// identity: every value every rank loaded, whatever the layout (what --resume, --save-kv and
// --kv-store compare, so it is known before any of them opens a file).
// (A stage's CP ranks load the same weights: CP rank 0's digests stand for them all, so the
// identity is the same whatever the layout.)
void make_backend(PreparedRun& run, bool profiles) {
  const sched::ChunkingOptions& chunking = run.options.chunking;
  pipeline::BackendRequest request = backend_request(run.options.placement, chunking.page_size,
                                                     sched::longest_chunk(chunking.initial_chunk, chunking.page_size));
  request.cost_source = chunking.cost_source;
  request.cp_chunk = sched::shortest_chunk(chunking);
  request.cp_attention = sched::parse_cp_attention(run.options.cp_attention);
  if (profiles) request.profile_room_tokens = pipeline::profile_capacity_tokens(run.lengths, chunking.initial_chunk);
  run.backend = pipeline::make_stage_backend(run.topo, run.rank_model, request, run.lengths);
  if (run.options.placement.backend != compute::BackendKind::kEmulate)
    run.rank_model.weights_fingerprint = pipeline::agree_on_weights_identity(
        run.rank_model, run.topo.cp_rank == 0 ? run.backend.weights_digests : std::vector<model::BlockDigest>{});
}

// Rank 0 takes the --save-kv directory (one run at a time; it removes what killed runs left
// there) and opens the output. False on every rank when the output is already complete.
bool open_outputs(PreparedRun& run) {
  const RunOptions& options = run.options;
  int already_complete = 0;
  dist::checked_step(MPI_COMM_WORLD, [&] {
    if (!run.topo.is_writer()) return;
    if (!options.save_kv.empty()) {
      run.export_lock =
          std::make_unique<io::DirectoryLock>(options.save_kv, "--save-kv", io::this_run_in_words(options.output));
      if (const int removed = run.export_lock->remove_partial_files(kv::kv_export_file_patterns());
          removed > 0 && !options.quiet)
        std::printf("note: removed %d unfinished file(s) that killed runs left in %s\n", removed,
                    options.save_kv.c_str());
      // --overwrite: an earlier export there goes whole, not prompt by prompt (none of its
      // prompts may outlive it beside this run's index.json).
      if (options.overwrite && !options.resume)
        if (const int removed = run.export_lock->remove_files(kv::kv_export_file_patterns());
            removed > 0 && !options.quiet)
          std::printf("note: --overwrite: removed the %d file(s) of the export that was in %s\n", removed,
                      options.save_kv.c_str());
    }
    run.results = open_output(options, run.rank_model, run.prompts);
    already_complete = !run.results;
  });
  dist::broadcast_int(already_complete, 0, MPI_COMM_WORLD);
  if (already_complete && run.topo.is_writer()) {
    std::printf("%s is already complete: nothing to resume\n", options.output.c_str());
    if (!options.save_kv.empty())
      std::printf(
          "note: nothing was computed, so nothing was exported to %s (the run that computes a prompt "
          "exports it: run again to a new --output)\n",
          options.save_kv.c_str());
  }
  return !already_complete;
}

// Checkpoints inside a prompt (where the backend reads its KV back and writes it again):
// with --resume, the prompt an interrupted run was inside is restored from its newest
// checkpoint that verifies on every rank.
void open_checkpoints(PreparedRun& run) {
  const RunOptions& options = run.options;
  const compute::BackendKind backend = options.placement.backend;
  if (!compute::supports(backend, compute::Product::kKvExport) ||
      !compute::supports(backend, compute::Product::kKvStore))
    return;
  pipeline::CheckpointSettings settings;
  settings.dir = options.output + ".checkpoint";
  settings.interval_s = options.checkpoint_interval_s;
  settings.mtbf_s = options.mtbf_s;
  settings.resume = options.resume;
  settings.quiet = options.quiet;
  const bool writer = run.topo.is_writer();
  // The manifest's identity: the output's, as its own check compares it (paths by content).
  const std::string identity =
      writer ? io::compared_identity(run_identity(options, run.rank_model, run.prompts)).dump() : "";
  if (writer && !run.results->resumed()) {  // a new output: what an earlier run left is not its
    std::error_code error;
    std::filesystem::remove_all(settings.dir, error);
  }
  run.checkpoint = std::make_unique<pipeline::CheckpointRun>(run.topo, run.rank_model, settings, run.prompts,
                                                             run.lengths, run.done, run.results.get(), identity);
}

// The one resume state, on every rank, before anything reads it: the prompts the output holds
// verified, less those whose KV export some rank lacks (--save-kv), which the output forgets
// here (their flags cleared) so that they are computed again; and the prompt a checkpoint
// restores.
void decide_resume_state(PreparedRun& run) {
  if (run.topo.is_writer()) run.done = run.results->completed();
  dist::broadcast_vector(run.done, MPI_COMM_WORLD);
  open_checkpoints(run);
  if (run.options.save_kv.empty()) return;
  pipeline::KvExportStart start = pipeline::start_kv_export(run.topo, run.rank_model, run.options.save_kv,
                                                            run.options.kv_dtype, run.prompts, run.lengths, run.done);
  run.kv_export = std::move(start.exporter);
  dist::checked_step(MPI_COMM_WORLD, [&] {  // an HDF5 failure on rank 0 is every rank's error
    if (!start.prompts_again.here()) return;
    run.results->recompute(*start.prompts_again);
    run.done = run.results->completed();
  });
  dist::broadcast_vector(run.done, MPI_COMM_WORLD);
}

// The restored prompt runs first (the output continues its token rows), from its checkpoint.
// A prompt that would take a prefix from it no longer than the restored part computes that
// prefix instead with --hidden-states mean: the sum over it was the interrupted run's (or
// loads the store's offer, `outside`, where it has one: prefer_longer_outside kept the batch's).
void restore_prompt(sched::PrefixPlan& prefixes, const pipeline::RestoredPrompt& restored, const PreparedRun& run,
                    const std::vector<sched::PrefixReuse>& outside = {}) {
  if (!run.topo.is_writer()) return;
  const int n = static_cast<int>(run.lengths.size()), p = restored.prompt;
  if (prefixes.order.empty())
    for (int q = 0; q < n; ++q) prefixes.order.push_back(q);
  prefixes.order.erase(std::find(prefixes.order.begin(), prefixes.order.end(), p));
  prefixes.order.insert(prefixes.order.begin(), p);
  prefixes.reuse.resize(static_cast<size_t>(n));
  prefixes.reuse[p] = {restored.tokens, -1, -1, true};
  if (run.options.hidden_states != compute::HiddenStatesKind::kMean) return;
  // In plan order, so that a prompt reset here is seen by those that reuse from it: the sum
  // at c is made by the prompt that computed position c - 1, found up the chain of sources
  // (as HiddenStateRows finds it); if that is p at c <= tokens, it was the interrupted run's.
  for (int q : prefixes.order) {
    sched::PrefixReuse& reuse = prefixes.reuse[q];
    const int64_t c = reuse.tokens;
    int s = reuse.source;
    while (s >= 0 && s != p && c <= prefixes.reuse[s].tokens) s = prefixes.reuse[s].source;
    if (s == p && c <= restored.tokens) reuse = sched::store_offer(outside, q);
  }
}

// Prompts that share a prefix back to back, the prefix computed once (rank 0 finds them);
// with --kv-store, a prompt loads a longer prefix an earlier run stored, unless the run wants
// what the store does not keep (every position's scores, the mean hidden state).
sched::PrefixPlan share_prefixes(PreparedRun& run) {
  const std::vector<char>& done = run.done;
  const RunOptions& options = run.options;
  const bool writer = run.topo.is_writer();
  sched::PrefixPlan prefixes =
      writer && !options.no_prefix_cache
          ? sched::find_shared_prefixes(run.prompts.tokens, run.prompts.offsets, options.chunking.page_size, done,
                                        options.token_rows_wanted() ? run.prompts.score_start : std::vector<int64_t>{})
          : sched::PrefixPlan{};
  // (With --cp, decide_plan aligns these reuses to the chunks of the policy it settles on.)
  const bool restores = run.checkpoint && run.checkpoint->restored();
  if (options.kv_store.empty()) {
    if (restores) restore_prompt(prefixes, *run.checkpoint->restored(), run);
    if (restores && run.topo.cp > 1) sched::drop_reuse_from_loaded(prefixes);  // (rank 0: restores)
    return prefixes;
  }
  // Token scores and final-norm rows are lent with the prefix (kvcache/entry_scores.hpp).
  const bool load = !options.no_prefix_cache;
  const kv::ScoresLayout scores{options.logprobs,
                                options.top_k,
                                options.hidden_states == compute::HiddenStatesKind::kMean,
                                options.token_set,
                                {}};
  run.kv_store = std::make_unique<pipeline::KvStoreRun>(
      run.topo, run.rank_model, options.kv_store, run.prompts, run.lengths, done, options.chunking.page_size, load,
      options.placement.backend, options.placement.dtype, scores, options.kv_store_limit_bytes);
  if (writer) sched::prefer_longer_outside(prefixes, run.kv_store->offers());
  if (restores)
    restore_prompt(prefixes, *run.checkpoint->restored(), run,
                   writer ? run.kv_store->offers() : std::vector<sched::PrefixReuse>{});
  if (writer && run.topo.cp > 1) sched::drop_reuse_from_loaded(prefixes, run.kv_store->offers());
  return prefixes;
}

// The run's header on rank 0: model, layout, chunking, backend, input.
void print_header(const PreparedRun& run) {
  const RunOptions& options = run.options;
  const model::ModelShape& shape = run.rank_model.shape;
  const sched::BatchPlan& plan = run.decision.plan;
  const std::string cp = run.topo.cp > 1 ? " x cp " + std::to_string(run.topo.cp) : "";
  std::printf(
      "pipefill %s | %s %s (%.1fM active params) | pp %d%s x tp %d | layers %s | chunk %d (%s) | page %d | %s\n",
      PIPEFILL_VERSION, options.placement.model.c_str(), shape.name.c_str(), shape.active_parameters() / 1e6,
      run.topo.pp, cp.c_str(), run.topo.tp, model::partition_text(run.rank_model.partition).c_str(),
      options.chunking.initial_chunk, run.decision.policy_used.c_str(), options.chunking.page_size,
      run.backend.description.c_str());
  if (!run.backend.detail.empty()) std::printf("%s: %s\n", run.backend.description.c_str(), run.backend.detail.c_str());
  if (run.topo.cp > 1)
    std::printf(
        "context parallel: %d ranks a stage, each computing 1/%d of every chunk (zigzag pieces) and holding 1/%d of "
        "each prompt's KV cache; attention by %s%s\n",
        run.topo.cp, run.topo.cp, run.topo.cp, options.cp_attention.c_str(),
        options.cp_attention == "auto" ? " (per chunk, whichever moves fewer bytes: pass-KV or pass-Q)" : "");
  const io::ResultWriter& results = *run.results;
  std::string beyond;  // what the plan does not compute
  if (plan.restored_tokens() > 0)
    beyond += " (" + std::to_string(plan.restored_tokens()) + " more restored from a checkpoint)";
  if (plan.reused_tokens() > 0)
    beyond += " (" + std::to_string(plan.reused_tokens()) + " more reused from shared prefixes)";
  std::printf(
      "input %s: %d prompts%s, %lld tokens to compute%s, %zu micro-batches\n", options.input.c_str(),
      plan.num_prompts(),
      results.resumed() ? (" (" + std::to_string(results.completed_count()) + " done before, resumed)").c_str() : "",
      static_cast<long long>(plan.total_tokens()), beyond.c_str(), plan.micro_batches.size());
  if (shape.mla())
    std::printf(
        "kv cache: latent attention keeps %.0f values a token a layer for all %d heads (kv_lora_rank %d + "
        "rope %d), %.1fx less than their own K and V (%.0f)\n",
        shape.cached_values_per_token(), shape.num_heads, shape.kv_lora_rank, shape.qk_rope_head_dim,
        shape.full_kv_values_per_token() / shape.cached_values_per_token(), shape.full_kv_values_per_token());
  std::fflush(stdout);
}

}  // namespace

std::unique_ptr<PreparedRun> prepare_run(const RunOptions& options) {
  const PlacementOptions& place = options.placement;
  dist::set_watchdog_timeout(options.watchdog_timeout_s);
  // A heterogeneous launch (`mpirun A : B`) must not run ranks with different options.
  dist::require_same_as_rank0(to_json(options).dump(), "command line", MPI_COMM_WORLD);
  auto run = std::make_unique<PreparedRun>();
  run->options = options;
  run->topo = dist::make_topology(place.pp, place.tp, options.cp);

  // Model: config.json (or preset); for real compute also TP divisibility and every tensor's
  // shape. The emulator only counts FLOPs, so any config.json will do. The layer partition is
  // settled with the prompts (read_inputs).
  const bool emulate = place.backend == compute::BackendKind::kEmulate;
  run->rank_model = pipeline::open_rank_model(run->topo, place.model, place.seed, place.layer_partition,
                                              place.expert_split, /*with_weights=*/!emulate);
  const std::optional<sched::CostProfile> saved_costs = read_inputs(*run);
  // Dynamic chunking without a saved cost model profiles its stages (rank 0 loaded any).
  int profiles = options.chunking.dynamic() && !saved_costs ? 1 : 0;
  dist::broadcast_int(profiles, 0, MPI_COMM_WORLD);
  check_forward_memory(run->options, run->topo, run->rank_model, run->lengths, profiles != 0);
  make_backend(*run, profiles != 0);
  if (!open_outputs(*run)) {
    dist::free_topology(run->topo);
    return nullptr;
  }
  decide_resume_state(*run);  // and the KV export's writers (--save-kv)

  // Plan: shared prefixes first, cut into fixed chunks, or dynamic ones from cost models
  // (profiled now or loaded).
  const sched::PrefixPlan prefixes = share_prefixes(*run);
  run->decision = pipeline::decide_plan(run->topo, options.chunking, run->lengths, *run->backend.compute,
                                        run->rank_model.shape.hidden_size, saved_costs, run->done, prefixes,
                                        /*report_progress=*/!options.quiet);
  if (run->topo.is_writer() && !options.quiet) print_header(*run);
  if (run->topo.is_writer() && run->checkpoint && run->checkpoint->restored() && options.chunking.dynamic() &&
      !saved_costs)
    std::printf(
        "note: prompt %d continues in chunks from this run's own profile, which may differ from the interrupted "
        "run's: its results are within float32 rounding of an uninterrupted run, not bit-identical (a saved "
        "--cost-model keeps the chunks the same)\n",
        run->checkpoint->restored()->prompt);

  // Transport of hidden states between stages (host MPI, or device buffers over NCCL): its
  // slots hold this rank's rows of a micro-batch (sched/hidden_slots.hpp).
  const bool gathers_chunk =
      run->topo.last_stage() && run->topo.cp_rank == 0 &&
      sched::last_stage_reads_every_row(options.token_rows_wanted(),
                                        options.hidden_states == compute::HiddenStatesKind::kMean);
  const int slot_rows = sched::hidden_slot_rows(run->decision.plan.max_chunk(), run->topo.cp, gathers_chunk);
  run->transport = run->backend.make_transport(static_cast<size_t>(slot_rows) * run->rank_model.shape.hidden_size);
  return run;
}

}  // namespace pf::cli
