// Checkpoints inside a prompt (docs/checkpoints.md). A prompt of a million tokens takes hours
// on CPUs and minutes on a cluster; a stop signal, a time limit or a dead node must not cost
// it whole. At a chunk boundary that rank 0 calls (dist::CheckpointCall: periodically with
// --checkpoint-every, and always when a stop signal cuts the plan inside a prompt), every rank
// makes its KV rows of the prompt in flight durable, and rank 0 records, in one manifest
// written atomically, what a later run needs to continue that prompt there: each rank's
// checksum of its rows, the last stage's scoring state (the log-prob it carries to the next
// chunk, the running hidden-state sum) and the digest of the token rows already in the
// partial output. `--resume` then restores the prompt from the newest checkpoint whose
// every part verifies, and continues it as an uninterrupted run would have: same layout and
// chunks, bit-identical results; another layout (a job requeued onto another allocation)
// reads the layers and heads it needs from the files the old one wrote (kv_source.hpp).
//
//   OUTPUT.checkpoint/pp2_tp1_layers15.15/prompt-000007/stage01_tp00.safetensors
//                                          each rank's rows (kv_export's format), by layout
//   OUTPUT.checkpoint/checkpoint-000012.json   a manifest; the two newest are kept
//
// The files are written by a thread beside the compute (kv::KvExporter in checkpoint mode),
// only what is new: KV is append-only, so with --checkpoint-every every chunk's rows go to the
// writer as they are computed and a checkpoint is an fdatasync; without it, the rows are
// handed over at the stop. The run holding OUTPUT's lock holds the directory: two runs
// never share one. A failed write (a full disk) is a warning, and the run goes on without
// checkpoints.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "compute/stage_compute.hpp"
#include "dist/control_notices.hpp"
#include "dist/control_reports.hpp"
#include "dist/topology.hpp"
#include "io/results_h5.hpp"
#include "io/safetensors.hpp"
#include "kvcache/kv_export.hpp"
#include "kvcache/kv_source.hpp"
#include "pipeline/hidden_state_rows.hpp"
#include "pipeline/rank_setup.hpp"
#include "pipeline/token_scorer.hpp"
#include "sched/batch_plan.hpp"

namespace pf::pipeline {

// The prompt an interrupted run was inside, as a resumed run restores it. `prompt` and
// `tokens` on every rank; the scoring state where it is used.
struct RestoredPrompt {
  int prompt = -1;
  int64_t tokens = 0;
  float next_logprob = 0;          // rank 0: log p(token `tokens` | the tokens before it)
  bool rows_finite = true;         // rank 0: the token rows [0, tokens) are all finite
  std::vector<double> hidden_sum;  // the last stage's TP rank 0 (--hidden-states mean): over [0, tokens)
};

struct CheckpointSettings {
  std::string dir;        // OUTPUT.checkpoint
  double interval_s = 0;  // --checkpoint-every: 0 only at a stop, -1 auto (Young/Daly)
  double mtbf_s = 86400;  // --mtbf
  bool resume = false;    // look for a checkpoint to restore
  bool quiet = false;
};

// A run removes OUTPUT.checkpoint whole (a new output, or a complete one): UserError unless
// `dir` is absent or a directory of nothing but a run's checkpoint files (manifests, their
// temporaries, layout directories), so that nothing else there is ever removed with it.
void require_checkpoint_directory(const std::string& dir);

// Young/Daly: the interval that minimizes the expected time lost to checkpoints and failures,
// sqrt(2 x cost x MTBF), for a checkpoint that costs `cost_s` to the run.
double young_daly_interval(double cost_s, double mtbf_s);

class CheckpointRun {
 public:
  // Collective, once the output is open and its finished prompts known (`done`, every rank).
  // Rank 0: `results` and `identity` (the output's identity, which a manifest must carry).
  // With settings.resume, restores the newest checkpoint every rank verifies (said on rank 0).
  CheckpointRun(const dist::Topology& topology, const RankModel& rank_model, CheckpointSettings settings,
                const io::PromptSet& prompts, const std::vector<int64_t>& lengths, const std::vector<char>& done,
                io::ResultWriter* results, const std::string& identity);
  ~CheckpointRun();
  CheckpointRun(const CheckpointRun&) = delete;
  CheckpointRun& operator=(const CheckpointRun&) = delete;

  const std::optional<RestoredPrompt>& restored() const { return restored_; }

  // The stage loop's part. Before the loop: what it walks, and (the last stage's TP rank 0)
  // where its scoring state lives.
  void start(const sched::BatchPlan& plan, compute::StageCompute& compute, const TokenScorer* scorer,
             const HiddenStateRows* hidden_rows);
  // The restored prompt's rows [0, tokens) of this rank into its KV pages (before its first chunk).
  void load_restored(int prompt);
  const kv::KvExportLayout& layout() const { return layout_; }
  // With --checkpoint-every every computed chunk's rows go to the writer as they are made.
  bool feeds_every_chunk() const { return settings_.interval_s != 0; }
  // Rows of `prompt` the writer already has from position 0 (restored or handed over).
  int64_t handed(int prompt) const;
  void feed(int prompt, int64_t start, int count, std::vector<float> keys, std::vector<float> values, bool last);

  // Rank 0 before micro-batch i: the periodic call due now, if any, for a boundary a few
  // micro-batches ahead with a prompt in flight.
  std::optional<dist::CheckpointCall> due(long long i);
  // Rank 0, whether a stop can checkpoint the prompt in flight (no write has failed).
  bool enabled() const { return enabled_; }
  // Rank 0 when a stop cuts the plan at `cutoff`: the call for the prompt in flight there
  // (nullopt: none in flight, or already called there).
  std::optional<dist::CheckpointCall> final_call(long long cutoff);
  // Rank 0: the sequence of the last call made (0: none).
  long long last_sequence() const { return last_sequence_; }
  // Every rank: a call rank 0 announced (rank 0: its own).
  void accept(const dist::CheckpointCall& call);
  // Every rank at the boundary before micro-batch i: its part of the calls whose cutoff is i
  // (rows handed over, a sync asked of the writer, its scoring state kept); a call whose
  // cutoff it has passed is reported as missed.
  void reach(long long i);
  // Between micro-batches: finished syncs are reported; rank 0 writes the checkpoints whose
  // every part arrived.
  void poll();
  // After the loop, on every rank: every call answered, and on rank 0 written or abandoned.
  void finish();
  // Rank 0: the newest checkpoint this run wrote (prompt, tokens), if any.
  std::optional<std::pair<int, int64_t>> last_written() const { return last_written_; }
  // Rank 0, once OUTPUT is complete: the directory is no longer needed.
  void remove_directory();

 private:
  struct Part;     // one rank's answer to one call
  struct Pending;  // rank 0: one call's answers so far
  void restore(const std::vector<char>& done, io::ResultWriter* results);
  std::vector<std::pair<dist::CheckpointCall, bool>> calls_reached(long long i);
  // A CP rank other than 0: it holds a share of the stage's rows, which CP rank 0 writes.
  bool cp_share_only() const { return topo_.cp_rank != 0; }
  void report(const Part& part, const kv::KvSyncResult* synced);  // null: missed
  void take_report(int rank, const std::string& text);
  void write_if_complete();
  void write_manifest(const Pending& pending);
  dist::CheckpointCall call_at(long long cutoff);
  void remove_files_of_completed_prompts();  // rank 0
  double now() const;

  const dist::Topology& topo_;
  const RankModel& model_;
  CheckpointSettings settings_;
  std::vector<int64_t> lengths_;
  kv::KvExportLayout layout_;  // this rank's files
  std::unique_ptr<kv::KvExporter> writer_;
  std::string files_;  // this layout's directory under settings_.dir
  std::optional<RestoredPrompt> restored_;
  std::string restored_from_;                      // the directory of the layout that wrote it
  std::unique_ptr<kv::KvSource> restored_source_;  // this rank's rows of it, until loaded
  std::map<int, int64_t> handed_;                  // rows given to the writer, per prompt

  const sched::BatchPlan* plan_ = nullptr;
  compute::StageCompute* compute_ = nullptr;
  const TokenScorer* scorer_ = nullptr;
  const HiddenStateRows* hidden_rows_ = nullptr;

  std::vector<dist::CheckpointCall> accepted_;  // calls not yet reached
  std::set<long long> answered_;                // CP ranks other than 0: calls answered on CP rank 0's word
  std::vector<Part*> syncing_;                  // parts whose sync is under way
  std::vector<std::unique_ptr<Part>> parts_;
  dist::ControlReports reports_;

  // Rank 0.
  io::ResultWriter* results_ = nullptr;
  std::string identity_hash_;
  std::map<long long, std::unique_ptr<Pending>> pending_;
  long long next_sequence_ = 1;
  long long last_called_cutoff_ = -1;
  long long last_sequence_ = 0;
  double started_s_ = 0, last_call_s_ = 0;
  double interval_s_ = 0;  // the interval in force (auto: measured after the first checkpoint)
  bool enabled_ = true;    // a failed checkpoint turns them off
  bool interval_measured_ = false;
  std::optional<std::pair<int, int64_t>> last_written_;
  std::vector<int> plan_position_;  // per prompt: its first micro-batch in the plan (-1: not in it)
};

}  // namespace pf::pipeline
