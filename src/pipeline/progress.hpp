// Progress of a long run, printed by world rank 0 at a steady interval: prompts done,
// tokens through stage 0, throughput and an ETA. Plain lines (Slurm logs, files, anything
// launched by mpirun or srun); a live bar redrawn in place on a terminal when run without a
// launcher, or when PIPEFILL_PROGRESS=bar.
//
// The ETA weighs progress by compute, not tokens: a chunk after a prefix of L tokens
// attends to all of them, so for one 1M-token prompt the last chunks cost hundreds of
// times the first, and a token-linear ETA is off by orders of magnitude (18 minutes said,
// 28 hours taken). Given the plan (set_work), the fraction done is FLOPs of the
// micro-batches stage 0 has finished over the plan's FLOPs (sched/plan_flops.hpp).
//
// The ETA is the whole pipeline's, not stage 0's: after stage 0 finishes, the last stage still
// has its backlog (with --logprobs it also runs the LM head on every token, and can lag by
// minutes). Until a prompt completes, the drain is the last micro-batch through the other
// stages at stage 0's pace; once prompts complete, rank 0 knows how far the last stage lags
// (a prompt's logits arrive some time after stage 0 passed its last chunk) and its own pace
// (work completed per second), and the ETA is the later of the two estimates.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "model/model_shape.hpp"
#include "sched/batch_plan.hpp"
#include "sched/cost_profile.hpp"

namespace pf::pipeline {

// A plan's compute, micro-batch by micro-batch, whole model (all stages, all TP ranks).
struct PlanWork {
  std::vector<double> flops_through;  // [i]: FLOPs of micro-batches 0..i, in plan order
  double attention_flops = 0;         // QK^T and PV of every chunk over its prefix
  double projection_flops = 0;        // projections, MLP or experts, the LM head
  double total() const { return attention_flops + projection_flops; }
  // Share of the total in the first `micro_batches` micro-batches (1 for an empty plan).
  double fraction_done(long long micro_batches) const;
};
PlanWork plan_work(const sched::BatchPlan& plan, const model::ModelShape& shape);

// Seconds still to go when `fraction` of the work took `elapsed_s`, at the rate so far;
// -1 (unknown) before anything is done.
double remaining_seconds(double elapsed_s, double fraction);

// Each stage's chunk-cost model from the fits (the prefix fit when ok, else the SGLang fit).
// Stages without a fit of their own (only stage 0 profiled, as SGLang does) take stage 0's;
// `own_fits` says how many had their own. Empty when stage 0 has no usable fit.
std::vector<sched::ChunkCostModel> stage_models(const std::vector<sched::StageCostFit>& fits, int stages,
                                                int* own_fits = nullptr);

// The pipeline's time for the plan: every micro-batch at the pace of its slowest stage
// (the beat), then the last micro-batch's time on the other stages (the drain).
double predicted_seconds(const sched::BatchPlan& plan, const std::vector<sched::ChunkCostModel>& stage_models);

// "0.7s", "45s", "3m07s", "2h05m"; "?" when unknown (negative) or absurd.
std::string duration_text(double seconds);

struct ProgressCounts {
  long long micro_batches = 0;  // finished by stage 0, in plan order
  int64_t tokens = 0;           // in those micro-batches
  int prompts = 0;              // whose logits arrived (done on every stage)
};

class ProgressReporter {
 public:
  using Clock = std::function<double()>;  // seconds; empty: the monotonic clock
  // interval_s <= 0 turns the progress lines off.
  ProgressReporter(double interval_s, int64_t total_tokens, int total_prompts, std::FILE* out = stdout,
                   Clock clock = {});
  // From now on weigh progress by the plan's FLOPs. With `announce`, print the total work,
  // how it splits, and the time the stage fits predict (rank 0's decision.fits; null or
  // empty: the estimate comes with the first progress line). `stages` is the pipeline depth.
  void set_work(const sched::BatchPlan& plan, const model::ModelShape& shape, int stages,
                const std::vector<sched::StageCostFit>* fits, bool announce = true);
  // Called between micro-batches and when a prompt's logits arrive; prints at most once
  // per interval.
  void update(const ProgressCounts& done);
  void finish();  // ends a live bar's line

  // What the next line would say (for tests and the line itself).
  double fraction_done(const ProgressCounts& done) const;  // work if set_work was called, else tokens
  // Seconds until the last prompt's logits arrive, `elapsed_s` after the start.
  double eta_seconds(const ProgressCounts& done, double elapsed_s) const;

 private:
  void print(const ProgressCounts& done, double now);
  // Notes when stage 0 passes each prompt's last micro-batch and when its logits arrive.
  void observe(const ProgressCounts& done, double now);
  double drain_seconds(double stage0_fraction, double elapsed_s) const;
  double interval_s_;
  int64_t total_tokens_;
  int total_prompts_;
  std::FILE* out_;
  Clock clock_;
  bool live_;
  double start_s_;
  double last_print_s_;
  bool printed_ = false;
  PlanWork work_;
  bool weighted_ = false;  // set_work was called
  int stages_ = 1;
  // Plan indices of each prompt's last micro-batch, in plan order (the order logits arrive),
  // the times (since the start) stage 0 passed them and their logits arrived.
  std::vector<long long> last_micro_batch_;
  std::vector<double> passed_at_s_, arrived_at_s_;
};

}  // namespace pf::pipeline
