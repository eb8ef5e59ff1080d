// Progress lines and the work and time estimates behind them (see progress.hpp).
#include "pipeline/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "dist/clock_sync.hpp"
#include "trace/summary.hpp"

namespace pf::pipeline {
namespace {

// A live bar only on a real terminal. Under mpirun the rank's stdout is a pseudo-terminal
// even when mpirun's own output goes to a file, so launched ranks print lines unless
// PIPEFILL_PROGRESS=bar asks for the bar; PIPEFILL_PROGRESS=lines forces lines anywhere.
bool use_live_bar(std::FILE* out) {
  const char* choice = std::getenv("PIPEFILL_PROGRESS");
  if (choice && std::string(choice) == "bar") return true;
  if (choice && std::string(choice) == "lines") return false;
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("SLURM_JOB_ID");
  return !launched && isatty(fileno(out)) != 0;
}

}  // namespace

std::string duration_text(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "?";
  char text[32];
  if (seconds < 9.95) {  // a short run's estimate is still worth a digit, not "0s"
    std::snprintf(text, sizeof text, "%.1fs", seconds);
    return text;
  }
  const long s = static_cast<long>(seconds + 0.5);
  if (s >= 3600)
    std::snprintf(text, sizeof text, "%ldh%02ldm", s / 3600, (s / 60) % 60);
  else if (s >= 60)
    std::snprintf(text, sizeof text, "%ldm%02lds", s / 60, s % 60);
  else
    std::snprintf(text, sizeof text, "%lds", s);
  return text;
}

double PlanWork::fraction_done(long long micro_batches) const {
  if (flops_through.empty() || !(total() > 0)) return 1.0;
  if (micro_batches <= 0) return 0.0;
  const size_t last = std::min(static_cast<size_t>(micro_batches), flops_through.size()) - 1;
  return flops_through[last] / total();
}

PlanWork plan_work(const sched::BatchPlan& plan, const model::ModelShape& shape) {
  PlanWork work;
  work.flops_through.reserve(plan.micro_batches.size());
  double through = 0;
  for (const auto& mb : plan.micro_batches) {
    // model::chunk_flops's two parts, kept apart for the announcement's split.
    const double all = model::chunk_flops(shape, 0, shape.num_layers, mb.length, mb.start);
    const double attention = shape.num_layers * shape.attention_flops(static_cast<double>(mb.start), mb.length);
    const double head = mb.is_last ? shape.lm_head_flops() : 0.0;
    work.attention_flops += attention;
    work.projection_flops += all - attention + head;
    through += all + head;
    work.flops_through.push_back(through);
  }
  return work;
}

double remaining_seconds(double elapsed_s, double fraction) {
  if (!(fraction > 0)) return -1;
  return elapsed_s * (1.0 - std::min(fraction, 1.0)) / fraction;
}

std::vector<sched::ChunkCostModel> stage_models(const std::vector<sched::StageCostFit>& fits, int stages,
                                                int* own_fits) {
  std::vector<const sched::ChunkCostModel*> chosen(std::max(stages, 0), nullptr);
  for (const auto& fit : fits) {
    if (fit.stage < 0 || fit.stage >= stages) continue;
    if (fit.prefix.ok)
      chosen[fit.stage] = &fit.prefix.model;
    else if (fit.sglang.ok)
      chosen[fit.stage] = &fit.sglang.model;
  }
  if (own_fits) *own_fits = static_cast<int>(std::count_if(chosen.begin(), chosen.end(), [](auto* m) { return m; }));
  if (chosen.empty() || !chosen[0]) return {};
  std::vector<sched::ChunkCostModel> models;
  for (const auto* model : chosen) models.push_back(model ? *model : *chosen[0]);
  return models;
}

double predicted_seconds(const sched::BatchPlan& plan, const std::vector<sched::ChunkCostModel>& stage_models) {
  if (stage_models.empty() || plan.micro_batches.empty()) return 0;
  double beat_total = 0, drain = 0;
  for (const auto& mb : plan.micro_batches) {
    double slowest = 0, all_stages = 0;
    for (const auto& model : stage_models) {
      const double t = model.chunk_time(static_cast<double>(mb.start), mb.length);
      slowest = std::max(slowest, t);
      all_stages += t;
    }
    beat_total += slowest;
    drain = all_stages - slowest;  // kept for the last micro-batch
  }
  return beat_total + drain;
}

ProgressReporter::ProgressReporter(double interval_s, int64_t total_tokens, int total_prompts, std::FILE* out,
                                   Clock clock)
    : interval_s_(interval_s),
      total_tokens_(total_tokens),
      total_prompts_(total_prompts),
      out_(out),
      clock_(clock ? std::move(clock) : Clock(dist::steady_seconds)),
      live_(use_live_bar(out)),
      start_s_(clock_()),
      last_print_s_(start_s_) {}

void ProgressReporter::set_work(const sched::BatchPlan& plan, const model::ModelShape& shape, int stages,
                                const std::vector<sched::StageCostFit>* fits, bool announce) {
  work_ = plan_work(plan, shape);
  weighted_ = true;
  stages_ = std::max(stages, 1);
  last_micro_batch_.clear();
  for (size_t i = 0; i < plan.micro_batches.size(); ++i)
    if (plan.micro_batches[i].is_last) last_micro_batch_.push_back(static_cast<long long>(i));
  if (!announce) return;
  const double total = work_.total();
  const double attention_share = total > 0 ? work_.attention_flops / total : 0;
  std::fprintf(out_, "work: %s in %zu micro-batches (attention %.0f%%, projections and LM head %.0f%%)",
               trace::scaled_flops(total, "%.3g").c_str(), plan.micro_batches.size(), 100 * attention_share,
               100 * (1 - attention_share));
  int own_fits = 0;
  const auto models = fits ? stage_models(*fits, stages, &own_fits) : std::vector<sched::ChunkCostModel>();
  if (models.empty()) {
    std::fprintf(out_, "; the time estimate comes with the first progress line\n");
  } else {
    std::fprintf(out_, "; expected %s from the stage cost models",
                 duration_text(predicted_seconds(plan, models)).c_str());
    if (own_fits < stages)
      std::fprintf(out_, " (stage 0's stands in for the %d stage(s) without one)", stages - own_fits);
    std::fprintf(out_, "\n");
  }
  std::fflush(out_);
}

double ProgressReporter::fraction_done(const ProgressCounts& done) const {
  if (weighted_) return work_.fraction_done(done.micro_batches);
  return total_tokens_ > 0 ? static_cast<double>(done.tokens) / total_tokens_ : 1.0;
}

double ProgressReporter::eta_seconds(const ProgressCounts& done, double elapsed_s) const {
  const double fraction = fraction_done(done);
  const double stage0 = remaining_seconds(elapsed_s, fraction);
  if (!weighted_ || stages_ <= 1 || stage0 < 0) return stage0;
  // Stage 0 still working: its remaining time, then the drain. Done: what is left of the
  // drain since it passed the last micro-batch.
  const double drain = drain_seconds(fraction, elapsed_s);
  double eta =
      fraction < 1 || passed_at_s_.empty() ? stage0 + drain : std::max(0.0, passed_at_s_.back() + drain - elapsed_s);
  // The last stage's own pace, once it has completed prompts: the work it has still to do.
  if (!arrived_at_s_.empty() && arrived_at_s_.back() > 0) {
    const double completed = work_.fraction_done(last_micro_batch_[arrived_at_s_.size() - 1] + 1);
    const double pace = completed / arrived_at_s_.back();  // share of the work a second
    if (pace > 0) eta = std::max(eta, (1 - completed) / pace - (elapsed_s - arrived_at_s_.back()));
  }
  return std::max(eta, 0.0);
}

double ProgressReporter::drain_seconds(double stage0_fraction, double elapsed_s) const {
  // Measured: how long the latest prompt's logits took to arrive after stage 0 passed it.
  if (!arrived_at_s_.empty()) return arrived_at_s_.back() - passed_at_s_[arrived_at_s_.size() - 1];
  // Expected: the last micro-batch through the other stages at stage 0's pace (stage 0 ran
  // stage0_fraction of the work's first 1/P in elapsed_s; the last micro-batch is the
  // plan's costliest, so the average chunk would underestimate it).
  if (!(stage0_fraction > 0) || work_.flops_through.empty()) return 0;
  const size_t n = work_.flops_through.size();
  const double last = (work_.flops_through[n - 1] - (n > 1 ? work_.flops_through[n - 2] : 0)) / work_.total();
  return (stages_ - 1) * last * elapsed_s / stage0_fraction;
}

void ProgressReporter::observe(const ProgressCounts& done, double now) {
  const double t = now - start_s_;
  while (passed_at_s_.size() < last_micro_batch_.size() && done.micro_batches > last_micro_batch_[passed_at_s_.size()])
    passed_at_s_.push_back(t);
  while (arrived_at_s_.size() < passed_at_s_.size() && static_cast<int>(arrived_at_s_.size()) < done.prompts)
    arrived_at_s_.push_back(t);
}

void ProgressReporter::update(const ProgressCounts& done) {
  if (interval_s_ <= 0) return;
  const double now = clock_();
  observe(done, now);
  if (now - last_print_s_ < interval_s_) return;
  last_print_s_ = now;
  print(done, now);
}

void ProgressReporter::print(const ProgressCounts& done, double now) {
  const double elapsed = now - start_s_;
  const double fraction = fraction_done(done);
  const double token_fraction = total_tokens_ > 0 ? static_cast<double>(done.tokens) / total_tokens_ : 1.0;
  const double rate = elapsed > 0 ? done.tokens / elapsed : 0;
  const std::string eta = duration_text(eta_seconds(done, elapsed));
  if (live_) {
    constexpr int kWidth = 30;
    const int filled = std::clamp(static_cast<int>(fraction * kWidth), 0, kWidth);
    std::fprintf(out_, "\r[%s%s] %5.1f%%%s | prompts %d/%d | %.0f tokens/s | ETA %s   ",
                 std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(), 100 * fraction,
                 weighted_ ? " of work" : "", done.prompts, total_prompts_, rate, eta.c_str());
  } else {
    // tests/mpi/emulate_run.sh reads the line up to "prompts N/M done".
    std::fprintf(out_, "progress: %5.1f%% of tokens through stage 0, prompts %d/%d done", 100 * token_fraction,
                 done.prompts, total_prompts_);
    if (weighted_) std::fprintf(out_, ", %.1f%% of the work (FLOPs)", 100 * fraction);
    std::fprintf(out_, ", %.0f tokens/s, elapsed %s, ETA %s\n", rate, duration_text(elapsed).c_str(), eta.c_str());
  }
  std::fflush(out_);
  printed_ = true;
}

void ProgressReporter::finish() {
  if (printed_ && live_) std::fprintf(out_, "\n");
}

}  // namespace pf::pipeline
