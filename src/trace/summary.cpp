// Summary statistics from the gathered timeline.
#include "trace/summary.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace pf::trace {

RunSummary summarize(const sched::BatchPlan& plan, const std::vector<TimelineEvent>& events, int pp, int tp,
                     double wall_s, double model_flops) {
  RunSummary s;
  s.model_flops = model_flops;
  s.num_prompts = plan.num_prompts();
  s.scheduled_prompts = plan.scheduled_prompts();
  s.num_tokens = plan.total_tokens();
  s.num_micro_batches = static_cast<int>(plan.micro_batches.size());
  for (const auto& mb : plan.micro_batches) {
    if (!mb.is_first || mb.start == 0 || plan.restored(mb.prompt)) continue;
    ++s.reusing_prompts;
    if (plan.reuse[mb.prompt].store_entry >= 0) s.loaded_tokens += mb.start;
  }
  s.reused_tokens = plan.reused_tokens();
  s.pp = pp;
  s.wall_s = wall_s;
  s.tokens_per_s = wall_s > 0 ? static_cast<double>(s.num_tokens) / wall_s : 0;
  s.ttft_s.assign(s.num_prompts, NAN);  // NaN: not run now (done by an earlier, resumed run)
  std::vector<double> busy(pp, 0.0);
  for (const auto& e : events) {
    const auto kind = static_cast<EventKind>(e.kind);
    // Busy: the stage's compute and LM head. The KV store's loads and the export's copies are
    // events of their own, not counted: on device-timed backends the copy waits for the
    // forward whose device span is already counted.
    if (kind == EventKind::kCompute || kind == EventKind::kLmHead) busy[e.stage] += e.t_end_s - e.t_start_s;
    // The prompt's last LM-head span ends at its TTFT (with --logprobs every chunk has one).
    if (kind == EventKind::kLmHead && e.stage == pp - 1 && e.tp_rank == 0)
      s.ttft_s[e.prompt] = std::isnan(s.ttft_s[e.prompt]) ? e.t_end_s : std::max(s.ttft_s[e.prompt], e.t_end_s);
  }
  // A prompt a stop cut inside has LM-head spans (--logprobs) but no TTFT: only the prompts
  // this plan finishes have one.
  std::vector<char> started(static_cast<size_t>(s.num_prompts), 0), finished(started);
  for (const auto& mb : plan.micro_batches) {
    started[mb.prompt] = 1;
    if (mb.is_last) finished[mb.prompt] = 1;
  }
  for (size_t p = 0; p < started.size(); ++p) {
    if (!finished[p]) s.ttft_s[p] = NAN;
    if (started[p] && !finished[p]) ++s.partial_prompts;
  }
  const int m = s.num_micro_batches;
  s.bubble_ideal = m > 0 ? static_cast<double>(pp - 1) / (pp - 1 + m) : 0;
  double idle_sum = 0;
  for (int stage = 0; stage < pp; ++stage) {
    const double fraction = wall_s > 0 ? busy[stage] / tp / wall_s : 0;
    s.stage_busy_fraction.push_back(fraction);
    s.stage_busy_s.push_back(busy[stage] / tp);
    idle_sum += 1.0 - fraction;
  }
  s.bubble_measured = idle_sum / pp;
  return s;
}

std::string scaled_flops(double flops, const char* format) {
  static const char* const kUnits[] = {"GFLOP", "TFLOP", "PFLOP", "EFLOP"};
  double value = flops / 1e9;
  int unit = 0;
  while (unit < 3 && std::fabs(value) >= 1000) {
    value /= 1000;
    ++unit;
  }
  char number[32];
  std::snprintf(number, sizeof number, format, value);
  return std::string(number) + " " + kUnits[unit];
}

std::string flop_rate_text(double flops_per_s) {
  return scaled_flops(flops_per_s, "%.2f") + "/s";
}

void print_partition_advice(const RunSummary& s, const std::vector<model::StageRange>& used, std::FILE* out) {
  if (s.stage_busy_s.size() < 2) return;
  const auto [low, high] = std::minmax_element(s.stage_busy_s.begin(), s.stage_busy_s.end());
  // Sub-second stages are timing noise more than balance: no advice from them.
  if (!(*low > 0) || *high < 1.15 * *low || *high < 1.0) return;
  const std::vector<model::StageRange> better = model::suggested_partition(used, s.stage_busy_s);
  if (better.empty() || model::partition_text(better) == model::partition_text(used)) return;
  std::fprintf(out,
               "note: the stages were unevenly busy (%.0f%% to %.0f%% of the wall time, layers %s): --layer-partition "
               "%s would even them out (from this run's measured stage times)\n",
               100 * *low / s.wall_s, 100 * *high / s.wall_s, model::partition_text(used).c_str(),
               model::partition_text(better).c_str());
}

namespace {

// The micro-batches `plan`'s computed tokens make at fixed chunks of `chunk`.
int64_t micro_batches_at(const sched::BatchPlan& plan, int chunk) {
  std::vector<int64_t> computed(plan.prompt_lengths.size(), 0);
  for (const auto& mb : plan.micro_batches) computed[mb.prompt] += mb.length;
  int64_t count = 0;
  for (int64_t tokens : computed) count += (tokens + chunk - 1) / chunk;
  return count;
}

}  // namespace

void print_chunk_advice(const RunSummary& s, const sched::BatchPlan& plan, const std::string& policy_used,
                        std::FILE* out) {
  constexpr double kIdleWorthANote = 0.2;
  constexpr int kSmallestAdvised = 256;  // below it, per-chunk costs eat what the bubble gives back
  if (s.pp < 2 || policy_used != "fixed" || s.bubble_ideal <= kIdleWorthANote || s.bubble_measured <= kIdleWorthANote)
    return;
  const int64_t wanted = 9 * static_cast<int64_t>(s.pp - 1);
  const int used = plan.max_chunk();
  int chunk = used;
  while (micro_batches_at(plan, chunk) < wanted && chunk / 2 >= kSmallestAdvised) chunk /= 2;
  if (chunk >= used) return;
  const int64_t m = micro_batches_at(plan, chunk);
  std::fprintf(out,
               "note: %d micro-batch%s through %d stages left them idle %.0f%% of the time; --chunk-size %d would "
               "cut this batch into %lld (ideal bubble %.0f%% instead of %.0f%%; docs/tuning.md)\n",
               s.num_micro_batches, s.num_micro_batches == 1 ? "" : "es", s.pp, 100 * s.bubble_measured, chunk,
               static_cast<long long>(m), 100.0 * (s.pp - 1) / static_cast<double>(s.pp - 1 + m), 100 * s.bubble_ideal);
}

void print_summary(const RunSummary& s, std::FILE* out, size_t max_prompts) {
  std::fprintf(out, "\n== pipefill summary ==\n");
  // What this run computed: a stop's cut leaves the rest of the plan, and a resume's earlier
  // runs did the prompts not run now.
  std::string partial;
  if (s.partial_prompts > 0) partial = ", " + std::to_string(s.partial_prompts) + " in part";
  std::fprintf(out, "prompts %d (%d run now%s), tokens %lld, micro-batches %d\n", s.num_prompts, s.scheduled_prompts,
               partial.c_str(), static_cast<long long>(s.num_tokens), s.num_micro_batches);
  std::fprintf(out, "wall %.3f s, %.1f tokens/s, %s achieved (%.3g model FLOPs)\n", s.wall_s, s.tokens_per_s,
               flop_rate_text(s.wall_s > 0 ? s.model_flops / s.wall_s : 0.0).c_str(), s.model_flops);
  size_t shown = 0, hidden = 0;
  for (size_t p = 0; p < s.ttft_s.size(); ++p) {
    if (std::isnan(s.ttft_s[p])) continue;
    if (shown++ < max_prompts)
      std::fprintf(out, "  prompt %zu ttft_s: %.4f\n", p, s.ttft_s[p]);
    else
      ++hidden;
  }
  if (hidden) std::fprintf(out, "  ... %zu more in /ttft_s\n", hidden);
  if (shown > 0) {
    double sum = 0;
    for (double t : s.ttft_s) sum += std::isnan(t) ? 0.0 : t;
    std::fprintf(out, "ttft mean %.4f s over %zu prompts\n", sum / static_cast<double>(shown), shown);
  }
  if (s.reused_tokens > 0)
    std::fprintf(
        out,
        "prefix reuse: %d of %d prompts started after a shared prefix; %lld tokens reused%s, %lld computed "
        "(%.1f%% of these prompts' tokens not computed; per prompt in /reused_tokens)\n",
        s.reusing_prompts, s.scheduled_prompts + s.partial_prompts, static_cast<long long>(s.reused_tokens),
        s.loaded_tokens > 0 ? (" (" + std::to_string(s.loaded_tokens) + " loaded from --kv-store)").c_str() : "",
        static_cast<long long>(s.num_tokens),
        100.0 * static_cast<double>(s.reused_tokens) / static_cast<double>(s.reused_tokens + s.num_tokens));
  std::fprintf(out, "stage busy fraction:");
  for (double f : s.stage_busy_fraction) std::fprintf(out, " %.3f", f);
  std::fprintf(out, "\nbubble: measured %.3f, ideal (P-1)/(P-1+M) = %.3f (P=%d, M=%d)\n", s.bubble_measured,
               s.bubble_ideal, s.pp, s.num_micro_batches);
}

}  // namespace pf::trace
