// `pipefill run` in three steps, each collective over MPI_COMM_WORLD (every rank calls each,
// in this order), so that src/main.cpp reads as the story:
//   prepare_run   options -> topology -> model -> prompts -> backend and weights -> outputs
//                 -> KV export and store -> plan -> transport;
//   run_loop      one time base, every rank walks the plan, the outputs' rank files finished;
//   report_run    timeline, traffic and op times gathered, rank 0 writes and prints, exit status.
// A step that fails on bad input fails on every rank (dist::checked_step): rank 0 prints one
// `error:` line and every rank exits with status 2.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/options.hpp"
#include "dist/clock_sync.hpp"
#include "dist/topology.hpp"
#include "dist/transport.hpp"
#include "io/directory_lock.hpp"
#include "io/prompts_h5.hpp"
#include "io/results_h5.hpp"
#include "kvcache/kv_export.hpp"
#include "pipeline/backend_setup.hpp"
#include "pipeline/checkpoint_run.hpp"
#include "pipeline/chunk_planning.hpp"
#include "pipeline/kv_store_setup.hpp"
#include "pipeline/rank_setup.hpp"
#include "pipeline/stage_loop.hpp"
#include "pipeline/stored_results.hpp"
#include "trace/timeline.hpp"

namespace pf::cli {

// What a run holds from its set-up to its report. Members are declared in set-up order and
// destroyed in the reverse one (the transport before the backend that made it). Values marked
// "rank 0" are empty or null on the other ranks.
struct PreparedRun {
  RunOptions options;
  dist::Topology topo;
  pipeline::RankModel rank_model;
  io::PromptSet prompts;         // rank 0
  std::vector<int64_t> lengths;  // every rank
  pipeline::StageBackend backend;
  std::unique_ptr<io::DirectoryLock> export_lock;  // rank 0: --save-kv DIR, one run at a time
  std::unique_ptr<io::ResultWriter> results;       // rank 0
  std::vector<char> done;                          // every rank: the prompts this run skips (resume state)
  std::unique_ptr<kv::KvExporter> kv_export;       // --save-kv
  std::unique_ptr<pipeline::KvStoreRun> kv_store;  // --kv-store
  // Checkpoints inside a prompt, and the prompt restored from one (null where the backend
  // cannot read its KV back).
  std::unique_ptr<pipeline::CheckpointRun> checkpoint;
  pipeline::PlanDecision decision;
  std::unique_ptr<dist::Transport> transport;
};

// Collective. Null when OUTPUT is already complete (--resume has nothing to do; said on
// rank 0, the topology freed).
std::unique_ptr<PreparedRun> prepare_run(const RunOptions& options);

// What the loop leaves for the report (not movable: the timeline holds the clock).
struct FinishedLoop {
  std::optional<dist::RunClock> clock;  // one time base for every rank's timeline
  std::optional<trace::Timeline> timeline;
  pipeline::LoopResult result;
  double wall_s = 0;
  std::optional<pipeline::StoredResults> stored;  // rank 0
  std::optional<std::string> output_error;        // a failed --save-kv or --kv-store
};

// Collective: every rank walks the plan (rank 0 stores results as they arrive), then the KV
// export and store are finished on every rank. `stop_requested`: set by a signal handler.
std::unique_ptr<FinishedLoop> run_loop(PreparedRun& run, volatile int* stop_requested);

// Collective: gathers, rank 0 renames the output into place, writes the trace and prints the
// summary; frees the topology. Returns the exit status: 0, kExitUserError (results not finite,
// a failed export) or kExitStopped (stopped by a signal, resumable).
constexpr int kExitStopped = 75;  // EX_TEMPFAIL: interrupted, resume me
int report_run(PreparedRun& run, FinishedLoop& loop);

}  // namespace pf::cli
