// report_run: gathers, rank 0's output, trace and summary, the exit status (see run_steps.hpp).
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "cli/run_record.hpp"
#include "cli/run_steps.hpp"
#include "dist/activation_wire.hpp"
#include "dist/collectives.hpp"
#include "errors.hpp"
#include "sched/cp_ring_widths.hpp"
#include "sched/hidden_slots.hpp"
#include "sched/plan_flops.hpp"
#include "trace/chrome_trace.hpp"
#include "trace/expert_load.hpp"
#include "trace/op_times.hpp"
#include "trace/summary.hpp"
#include "trace/traffic.hpp"

namespace pf::cli {
namespace {

// Rank 0: how the run ended, when it did not end with the output in place.
void print_unfinished(const PreparedRun& run, const std::vector<int>& nonfinite_prompts) {
  const io::ResultWriter& results = *run.results;
  const std::string& output = run.options.output;
  if (nonfinite_prompts.empty()) {
    std::string inside;
    if (run.checkpoint && run.checkpoint->last_written() &&
        !results.completed().at(run.checkpoint->last_written()->first))
      inside = ", prompt " + std::to_string(run.checkpoint->last_written()->first) + " checkpointed at token " +
               std::to_string(run.checkpoint->last_written()->second);
    std::printf("stopped: %d of %d prompts are in %s.partial%s; run again with --resume to finish\n",
                results.completed_count(), run.decision.plan.num_prompts(), output.c_str(), inside.c_str());
    return;
  }
  const size_t count = nonfinite_prompts.size();
  std::string which;
  for (size_t i = 0; i < count && i < 8; ++i) which += (i ? ", " : "") + std::to_string(nonfinite_prompts[i]);
  // Where the finished prompts are: the partial output, unless none was stored (then no file
  // was left, and an earlier OUTPUT is as it was).
  std::error_code error;
  const std::string kept = std::filesystem::exists(output + ".partial", error)
                               ? std::to_string(results.completed_count()) + " prompt(s) are in " + output + ".partial"
                               : "no output was written";
  std::fprintf(stderr,
               "error: the results of %zu prompt(s) are not finite (NaN or Inf): prompt %s%s; they were not "
               "stored (do the weights or the config overflow float32?). %s\n",
               count, which.c_str(), count > 8 ? ", ..." : "", kept.c_str());
}

void print_scores(const io::ResultWriter& results) {
  if (results.scored_tokens() == 0) return;
  std::printf(
      "log-probs: %lld tokens scored in the %d prompt%s finished this run, perplexity %.4g (exp of their mean NLL; "
      "per prompt in /perplexity)\n",
      static_cast<long long>(results.scored_tokens()), results.written_this_run(),
      results.written_this_run() == 1 ? "" : "s",
      std::exp(results.scored_nll_sum() / static_cast<double>(results.scored_tokens())));
}

// What a CP rank's ring moves per token (one TP rank's heads), for the traffic report.
trace::CpTrafficShape cp_traffic_shape(const PreparedRun& run) {
  trace::CpTrafficShape cp;
  cp.ranks = run.topo.cp;
  if (cp.ranks == 1) return cp;
  // From the shape: the emulator opens no config and makes no shard.
  cp.widths = sched::cp_ring_widths(run.rank_model.shape, run.topo.tp,
                                    run.options.placement.backend == compute::BackendKind::kCuda);
  cp.mode = sched::parse_cp_attention(run.options.cp_attention);
  return cp;
}

}  // namespace

int report_run(PreparedRun& run, FinishedLoop& loop) {
  const RunOptions& options = run.options;
  const model::ModelShape& shape = run.rank_model.shape;
  const sched::BatchPlan& plan = run.decision.plan;
  // What this run computed: the plan up to where a stop cut it.
  const sched::BatchPlan ran = plan.first_micro_batches(static_cast<size_t>(loop.result.micro_batches_run));
  const dist::Topology& topo = run.topo;
  const bool writer = topo.is_writer(), emulate = options.placement.backend == compute::BackendKind::kEmulate;
  const std::vector<int> nonfinite_prompts = writer ? loop.stored->nonfinite_prompts() : std::vector<int>();
  int nonfinite_count = static_cast<int>(nonfinite_prompts.size());
  dist::broadcast_int(nonfinite_count, 0, MPI_COMM_WORLD);

  // Timeline, traffic, expert load and op times gathered to rank 0.
  const auto events = trace::gather_timeline(*loop.timeline, MPI_COMM_WORLD);
  trace::TrafficReport traffic = trace::gather_traffic(
      topo, ran, shape.hidden_size, shape.hidden_size * dist::kActivationWireBytes, run.rank_model.partition,
      sched::last_stage_reads_every_row(options.token_rows_wanted(),
                                        options.hidden_states == compute::HiddenStatesKind::kMean),
      shape.mla(), loop.result.traffic, cp_traffic_shape(run));
  traffic.allreduce_modelled = emulate;
  const trace::ExpertLoad expert_load =
      trace::gather_expert_load(topo, run.backend.compute->expert_rows(), emulate ? 0 : shape.experts);
  const compute::OpTimes op_times = trace::gather_op_times(run.backend.compute->op_times());
  // The KV cache's high-water mark: the most any rank held (cpu: its paged pool), and its pool.
  double kv_peak[2] = {0, 0};
  if (const kv::PagedKvPool* pool = run.backend.kv_pool.get()) {
    kv_peak[0] = static_cast<double>(pool->peak_pages_in_use()) * pool->shape().bytes_per_page();
    kv_peak[1] = static_cast<double>(pool->num_pages()) * pool->shape().bytes_per_page();
  }
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, kv_peak, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  if (writer) {
    const trace::RunSummary summary =
        trace::summarize(ran, events, topo.pp, topo.cp * topo.tp, loop.wall_s, sched::plan_flops(shape, ran));
    // The trace first: a trace that cannot be written then fails the run before its output
    // replaces an existing one.
    if (!options.trace.empty()) trace::write_chrome_trace(options.trace, events, topo.pp, topo.tp, topo.cp);
    const bool complete = run.results->finish(
        events, output_attributes(options, run.rank_model, run.decision, run.backend.description, loop.wall_s));
    if (!options.quiet) {
      trace::print_summary(summary, stdout);
      trace::print_partition_advice(summary, run.rank_model.partition, stdout);
      trace::print_chunk_advice(summary, ran, run.decision.policy_used, stdout);
      trace::print_traffic(traffic, stdout);
      trace::print_expert_load(expert_load, stdout);
      trace::print_op_times(op_times, stdout);
      if (kv_peak[0] > 0)
        std::printf("kv cache: %.1f MiB at its peak on the rank that held the most (its pool: %.1f MiB)\n",
                    kv_peak[0] / (1024.0 * 1024.0), kv_peak[1] / (1024.0 * 1024.0));
      print_scores(*run.results);
    }
    if (complete && run.checkpoint) run.checkpoint->remove_directory();
    if (complete)
      std::printf("wrote %s%s%s\n", options.output.c_str(), options.trace.empty() ? "" : " and ",
                  options.trace.c_str());
    else
      print_unfinished(run, nonfinite_prompts);
  }
  // A failed KV export leaves the other outputs as they are (complete, or resumable).
  if (loop.output_error && writer) std::fprintf(stderr, "error: %s\n", loop.output_error->c_str());
  dist::free_topology(run.topo);
  if (nonfinite_count > 0 || loop.output_error) return kExitUserError;
  return loop.result.stopped ? kExitStopped : 0;
}

}  // namespace pf::cli
