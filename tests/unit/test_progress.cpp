// The progress reporter's arithmetic: work fractions weighed by FLOPs against closed forms
// (attention over a prompt tiled by chunks sums to N^2 + N per head and width), the ETA of
// one 1M-token prompt early on, the time the stage cost models predict against a schedule
// worked by hand, and the lines themselves (written to a temporary file, fake clock).
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>
#include <string>

#include "model/presets.hpp"
#include "pipeline/progress.hpp"
#include "sched/batch_plan.hpp"
#include "sched/plan_flops.hpp"
#include "trace/summary.hpp"

using namespace pf;
using namespace pf::pipeline;

namespace {

// Everything written to `file` so far.
std::string contents(std::FILE* file) {
  std::fflush(file);
  std::rewind(file);
  std::string text;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, file)) > 0;) text.append(buffer, n);
  return text;
}

// Lines, not a live bar, whatever the test's terminal.
struct PlainLines {
  PlainLines() { setenv("PIPEFILL_PROGRESS", "lines", 1); }
  ~PlainLines() { unsetenv("PIPEFILL_PROGRESS"); }
};

sched::StageCostFit fit_of(int stage, sched::FitResult sglang, sched::FitResult prefix) {
  sched::StageCostFit fit;
  fit.stage = stage;
  fit.sglang = sglang;
  fit.prefix = prefix;
  return fit;
}

}  // namespace

// One prompt of 1M tokens in chunks of 4096 (llama3-8b), 10 % of the chunks done after 100 s.
TEST(Progress, MillionTokenPromptEtaIsWeighedByFlops) {
  const PlainLines lines;
  const model::ModelShape shape = model::shape_from_config(model::preset_config("llama3-8b"));
  constexpr int64_t kLength = 1'000'000;
  const sched::BatchPlan plan = sched::make_plan({kLength}, sched::FixedChunkPolicy(4096));
  ASSERT_EQ(plan.micro_batches.size(), 245u);  // 244 x 4096 + 576
  const long long done_chunks = 24;            // 10 % of 245, rounded down
  const double prefix = done_chunks * 4096.0;  // P tokens done

  // Closed form: per layer, projections m per token and attention k (P^2 + P) over any
  // tiling of [0, P) (sum of 2 L x + x^2 + x over the chunks); the LM head once, at the end.
  const double layers = shape.num_layers;
  const double m = shape.matmul_flops(0, 1.0);
  const double k = shape.num_heads * shape.attention_width();
  const double n = static_cast<double>(kLength);
  const double total = layers * (m * n + k * (n * n + n)) + shape.lm_head_flops();
  const double expected_fraction = layers * (m * prefix + k * (prefix * prefix + prefix)) / total;

  const PlanWork work = plan_work(plan, shape);
  EXPECT_NEAR(work.total() / total, 1.0, 1e-12);
  EXPECT_NEAR(work.total() / sched::plan_flops(shape, plan), 1.0, 1e-12);  // the summary's count
  EXPECT_NEAR(work.attention_flops / (layers * k * (n * n + n)), 1.0, 1e-12);
  EXPECT_NEAR(work.fraction_done(done_chunks) / expected_fraction, 1.0, 1e-12);
  EXPECT_EQ(work.fraction_done(0), 0.0);
  EXPECT_EQ(work.fraction_done(245), 1.0);

  const double token_fraction = prefix / n;                          // 9.8 %
  EXPECT_LT(work.fraction_done(done_chunks), 0.2 * token_fraction);  // about 1.4 %: far below 10 %

  // The reporter, on a fake clock: 100 s after the start, 24 chunks through stage 0.
  double now = 1000;
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  ProgressReporter progress(1.0, plan.total_tokens(), 1, out, [&] { return now; });
  progress.set_work(plan, shape, 4, nullptr);
  now += 100;
  const ProgressCounts done{done_chunks, static_cast<int64_t>(prefix), 0};
  const double linear_eta = 100 * (1 - token_fraction) / token_fraction;  // what the token count says: 15m17s
  const double eta = progress.eta_seconds(done, 100);
  // Stage 0's remaining work at its pace so far, then the drain: the last micro-batch through
  // the other 3 stages at that pace.
  const double last_share = (work.flops_through[244] - work.flops_through[243]) / work.total();
  const double drain = 3 * last_share * 100 / expected_fraction;
  EXPECT_NEAR(eta, 100 * (1 - expected_fraction) / expected_fraction + drain, 1e-6 * eta);
  EXPECT_GT(eta, 5 * linear_eta);  // about 1h56m
  progress.update(done);

  const std::string text = contents(out);
  std::fclose(out);
  EXPECT_NE(text.find("work: 276 PFLOP in 245 micro-batches (attention 95%, projections and LM head 5%); "
                      "the time estimate comes with the first progress line\n"),
            std::string::npos)
      << text;
  char line[256];
  std::snprintf(line, sizeof line,
                "progress:   9.8%% of tokens through stage 0, prompts 0/1 done, %.1f%% of the work (FLOPs), "
                "983 tokens/s, elapsed 1m40s, ETA %s\n",
                100 * expected_fraction, duration_text(eta).c_str());
  EXPECT_NE(text.find(line), std::string::npos) << text << "\nexpected: " << line;
  // tests/mpi/emulate_run.sh reads the line up to "prompts N/M done".
  EXPECT_TRUE(std::regex_search(text, std::regex("(^|\n)progress: +[0-9.]+% of tokens through stage 0, prompts "
                                                 "[0-9]+/1 done")));
}

TEST(Progress, WithoutThePlanTheEtaIsTokenLinear) {
  const PlainLines lines;
  double now = 0;
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  ProgressReporter progress(10.0, 1000, 2, out, [&] { return now; });
  const ProgressCounts done{1, 250, 0};
  EXPECT_DOUBLE_EQ(progress.fraction_done(done), 0.25);
  EXPECT_DOUBLE_EQ(progress.eta_seconds(done, 30), 90);
  now = 5;
  progress.update(done);  // within the interval: nothing
  EXPECT_EQ(contents(out), "");
  now = 30;
  progress.update(done);
  EXPECT_EQ(contents(out),
            "progress:  25.0% of tokens through stage 0, prompts 0/2 done, 8 tokens/s, elapsed 30s, "
            "ETA 1m30s\n");
  std::fclose(out);
  EXPECT_EQ(remaining_seconds(10, 0), -1);  // nothing done: unknown
  EXPECT_EQ(duration_text(-1), "?");
  EXPECT_EQ(duration_text(0.72), "0.7s");
  EXPECT_EQ(duration_text(7265), "2h01m");
}

// Two prompts (300 and 100 tokens) in chunks of 100 on two stages, worked by hand.
TEST(Progress, StageCostModelsPredictBeatPlusDrain) {
  const sched::BatchPlan plan = sched::make_plan({300, 100}, sched::FixedChunkPolicy(100));
  ASSERT_EQ(plan.micro_batches.size(), 4u);  // prefixes 0, 100, 200 of prompt 0; 0 of prompt 1
  const sched::ChunkCostModel stage0{sched::CostForm::kPrefixAware, 1e-6, 1e-3, 0.01, 1e-5};
  const sched::ChunkCostModel stage1{sched::CostForm::kFreshQuadratic, 2e-6, 1e-3, 0, 0};
  // t0 = 0.01 + 1e-5 L + 1e-3 x + 1e-6 (2 L x + x^2): 0.12, 0.141, 0.162, 0.12
  // t1 = 1e-3 x + 2e-6 (2 L x + x^2):                  0.12, 0.16,  0.20,  0.12
  // beat: 0.12 + 0.16 + 0.20 + 0.12 = 0.60; drain: stage 0's 0.12 of the last = 0.72 s.
  EXPECT_NEAR(predicted_seconds(plan, {stage0, stage1}), 0.72, 1e-12);
  EXPECT_NEAR(predicted_seconds(plan, {stage0}), 0.12 + 0.141 + 0.162 + 0.12, 1e-12);
  EXPECT_NEAR(predicted_seconds(plan, {stage0, stage1, stage0}), 0.60 + 0.24, 1e-12);  // a longer drain

  // Fits to models: the prefix fit when ok, else the SGLang fit; stage 0's for the rest.
  const sched::FitResult failed{};
  const std::vector<sched::StageCostFit> fits = {fit_of(0, {stage1, true, ""}, {stage0, true, ""}),
                                                 fit_of(1, {stage1, true, ""}, failed)};
  int own = 0;
  auto models = stage_models(fits, 2, &own);
  ASSERT_EQ(models.size(), 2u);
  EXPECT_EQ(own, 2);
  EXPECT_EQ(models[0].c, stage0.c);
  EXPECT_EQ(models[1].a, stage1.a);
  models = stage_models({fits[0]}, 3, &own);  // SGLang profiles stage 0 only
  ASSERT_EQ(models.size(), 3u);
  EXPECT_EQ(own, 1);
  EXPECT_EQ(models[2].gamma, stage0.gamma);
  EXPECT_TRUE(stage_models({fit_of(0, failed, failed), fits[1]}, 2).empty());

  // The announcement, with the whole model's FLOPs of this plan (tiny preset).
  const PlainLines lines;
  const model::ModelShape shape = model::shape_from_config(model::preset_config("tiny"));
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  ProgressReporter progress(0, plan.total_tokens(), 2, out, [] { return 0.0; });
  progress.set_work(plan, shape, 2, &fits);
  progress.set_work(plan, shape, 3, &fits);
  const std::vector<sched::StageCostFit> none;
  progress.set_work(plan, shape, 2, &none);
  progress.set_work(plan, shape, 2, nullptr, /*announce=*/false);
  const std::string text = contents(out);
  std::fclose(out);
  const std::regex announcement(
      "work: [0-9.e+]+ [GTPE]FLOP in 4 micro-batches \\(attention [0-9]+%, projections and LM head [0-9]+%\\); "
      "expected 0.7s from the stage cost models\n"
      "work: .*; expected 0.8s from the stage cost models \\(stage 0's stands in for the 1 stage\\(s\\) without "
      "one\\)\n"
      "work: .*; the time estimate comes with the first progress line\n");
  EXPECT_TRUE(std::regex_match(text, announcement)) << text;
}

// Four equal prompts on two stages whose last stage is three times slower than stage 0 (as
// with --logprobs): when stage 0 is done, the ETA is the last stage's backlog, not zero.
TEST(Progress, EtaCoversTheLastStagesBacklog) {
  const PlainLines lines;
  const model::ModelShape shape = model::shape_from_config(model::preset_config("llama3-8b"));
  const sched::BatchPlan plan = sched::make_plan({100, 100, 100, 100}, sched::FixedChunkPolicy(100));
  double now = 0;
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  ProgressReporter progress(1000.0, plan.total_tokens(), 4, out, [&] { return now; });
  progress.set_work(plan, shape, 2, nullptr, /*announce=*/false);
  // Stage 0 passes a prompt a second; the last stage finishes one every 3 s.
  ProgressCounts done{};
  for (int t = 1; t <= 6; ++t) {
    now = t;
    if (t <= 4) {
      ++done.micro_batches;
      done.tokens += 100;
    }
    if (t % 3 == 0) ++done.prompts;
    progress.update(done);
  }
  EXPECT_EQ(progress.fraction_done(done), 1.0);           // stage 0 is done
  EXPECT_NEAR(progress.eta_seconds(done, 6), 6.0, 1e-9);  // two prompts left at 3 s each
  // Before any prompt arrives: stage 0's pace for the rest, and the last chunk through stage 1.
  ProgressReporter fresh(1000.0, plan.total_tokens(), 4, out, [&] { return 0.0; });
  fresh.set_work(plan, shape, 2, nullptr, false);
  EXPECT_NEAR(fresh.eta_seconds(ProgressCounts{2, 200, 0}, 2), 2.0 + 1.0, 1e-9);
  std::fclose(out);
}

TEST(Summary, FlopRatesCarryTheirUnit) {
  EXPECT_EQ(trace::flop_rate_text(124.41e9), "124.41 GFLOP/s");
  EXPECT_EQ(trace::flop_rate_text(2945234.59e9), "2.95 PFLOP/s");
  EXPECT_EQ(trace::flop_rate_text(1.5e12), "1.50 TFLOP/s");
  EXPECT_EQ(trace::flop_rate_text(0), "0.00 GFLOP/s");
}

// A 4K prompt at the default chunk through 2 stages is one micro-batch: half the run idle.
// The note names the chunk that makes M >= 9 (P - 1) by halving, never below 256, and only
// for fixed chunks whose bubble was both measured and ideal over a fifth of the run.
TEST(Summary, TooFewMicroBatchesForThePipelineGetAChunkNote) {
  const auto note = [](int pp, const std::vector<int64_t>& lengths, int chunk, double measured,
                       const std::string& policy) {
    const sched::BatchPlan plan = sched::make_plan(lengths, sched::FixedChunkPolicy(chunk));
    trace::RunSummary s;
    s.pp = pp;
    s.num_micro_batches = static_cast<int>(plan.micro_batches.size());
    s.bubble_ideal = static_cast<double>(pp - 1) / (pp - 1 + s.num_micro_batches);
    s.bubble_measured = measured;
    std::FILE* out = std::tmpfile();
    trace::print_chunk_advice(s, plan, policy, out);
    const std::string text = contents(out);
    std::fclose(out);
    return text;
  };
  const std::string one = note(2, {4096}, 4096, 0.5, "fixed");
  EXPECT_NE(one.find("note: 1 micro-batch through 2 stages left them idle 50% of the time; --chunk-size 256 would "
                     "cut this batch into 16 (ideal bubble 6% instead of 50%"),
            std::string::npos)
      << one;
  // Two prompts count together: 8 micro-batches of 1,024 at 4 stages want 27, 512 gives 16,
  // 256 gives 32.
  EXPECT_NE(note(4, {4096, 4096}, 1024, 0.4, "fixed").find("--chunk-size 256 would cut this batch into 32"),
            std::string::npos);
  // Never below 256 tokens: a 300-token prompt is left as it is.
  EXPECT_EQ(note(2, {300}, 4096, 0.5, "fixed"), "");
  EXPECT_EQ(note(1, {4096}, 4096, 0.0, "fixed"), "");   // no pipeline
  EXPECT_EQ(note(2, {4096}, 4096, 0.5, "sglang"), "");  // dynamic chunks: C0 is not the chunk
  EXPECT_EQ(note(2, {4096}, 4096, 0.1, "fixed"), "");   // measured bubble small (e.g. lent CPUs)
  EXPECT_EQ(note(2, {65536}, 4096, 0.3, "fixed"), "");  // 16 micro-batches: ideal 6 %
}
