// run_loop: every rank walks the plan (see run_steps.hpp).
#include "cli/run_steps.hpp"
#include "compute/backend_capabilities.hpp"
#include "dist/collectives.hpp"
#include "dist/wait.hpp"
#include "errors.hpp"
#include "pipeline/kv_export_setup.hpp"
#include "pipeline/progress.hpp"

namespace pf::cli {

std::unique_ptr<FinishedLoop> run_loop(PreparedRun& run, volatile int* stop_requested) {
  const RunOptions& options = run.options;
  const model::ModelShape& shape = run.rank_model.shape;
  const sched::BatchPlan& plan = run.decision.plan;
  const bool writer = run.topo.is_writer();
  auto loop = std::make_unique<FinishedLoop>();
  loop->clock.emplace(dist::synchronize_clocks(MPI_COMM_WORLD));
  loop->timeline.emplace(run.topo, *loop->clock);
  pipeline::ProgressReporter progress(options.quiet ? 0 : options.progress_interval_s, plan.total_tokens(),
                                      plan.num_prompts());
  if (writer) progress.set_work(plan, shape, run.topo.pp, &*run.decision.fits, /*announce=*/!options.quiet);
  // Rank 0 stores every finite result as it arrives; the rest is reported by report_run.
  const int hidden_width = options.hidden_states == compute::HiddenStatesKind::kNone ? 0 : shape.hidden_size;
  if (writer) loop->stored.emplace(*run.results, shape.vocab_size, hidden_width, plan);
  if (writer && run.kv_store)
    loop->stored->set_store_rows([store = run.kv_store.get()](int entry, int64_t at, int count,
                                                              const io::TokenRowsOut& rows) {
      // Checked before the plan; failing now (a file changed in place, a disk error), the
      // rows cannot come from anywhere else: the job ends naming it, here, before an
      // exception would unwind through receives MPI still writes into.
      try {
        store->read_scores(entry, at, count, rows);
      } catch (const std::exception& e) {
        fail_library_call("pipefill", "copying a prefix's token rows from --kv-store", e.what(), __FILE__, __LINE__);
      }
    });
  if (writer && run.checkpoint && run.checkpoint->restored()) {
    const pipeline::RestoredPrompt& restored = *run.checkpoint->restored();
    loop->stored->set_restored(restored.prompt, restored.next_logprob, restored.rows_finite);
  }

  pipeline::StageLoopContext context{run.topo,       plan,           run.prompts, *run.backend.compute,
                                     *run.transport, *loop->timeline};
  context.hidden_size = shape.hidden_size;
  context.vocab_size = shape.vocab_size;
  context.ring_depth = options.ring_depth;
  context.sink = writer ? &*loop->stored : nullptr;
  context.hidden_states = options.hidden_states;
  context.token_rows = options.token_row_shape();
  context.token_set = &options.token_set;
  context.kv_export = run.kv_export.get();
  context.kv_store = run.kv_store.get();
  if (run.kv_store) run.kv_store->start(run.decision.plan.reuse);
  context.checkpoint = run.checkpoint.get();
  context.progress = writer ? &progress : nullptr;
  context.stop_requested = stop_requested;
  context.all_reduce = run.backend.all_reduce.get();
  context.results_computed = compute::supports(options.placement.backend, compute::Product::kLogits);
  loop->result = pipeline::run_stage_loop(context);
  {
    dist::WaitLabel label("the end-of-run barrier (another rank is still in its loop)");
    dist::barrier(MPI_COMM_WORLD);
  }
  loop->wall_s = loop->clock->now();

  // Every rank's KV files written (or failed), then rank 0 lists them in DIR/index.json;
  // with --kv-store, every prompt all ranks finished becomes an entry.
  if (run.kv_export)
    loop->output_error =
        pipeline::finish_kv_export(run.topo, run.rank_model, options.save_kv, *run.kv_export, run.results.get());
  if (run.kv_store) {
    const std::optional<std::string> store_error = run.kv_store->finish(run.prompts, run.results.get());
    if (!loop->output_error) loop->output_error = store_error;
  }
  return loop;
}

}  // namespace pf::cli
