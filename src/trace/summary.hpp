// The end-of-run summary rank 0 prints: throughput, TTFT per prompt, per-stage busy
// fraction, and the measured pipeline bubble beside the ideal (P-1)/(P-1+M).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "model/layer_partition.hpp"
#include "sched/batch_plan.hpp"
#include "trace/timeline.hpp"

namespace pf::trace {

struct RunSummary {
  int num_prompts = 0;
  int scheduled_prompts = 0;  // finished now (the rest were done by an earlier run, or cut off by a stop)
  int partial_prompts = 0;    // started now and cut off by a stop (checkpointed, or to run again)
  int64_t num_tokens = 0;
  int num_micro_batches = 0;
  int pp = 1;
  double wall_s = 0;
  double tokens_per_s = 0;
  double model_flops = 0;                   // sched/plan_flops.hpp: all layers, all chunks, LM heads
  int reusing_prompts = 0;                  // prompts that started after a prefix they reused
  int64_t reused_tokens = 0;                // tokens those prompts reused instead of computing
  int64_t loaded_tokens = 0;                // of which loaded from the KV store (--kv-store)
  std::vector<double> ttft_s;               // per prompt: its logits done on the last stage; NaN if not run now
  std::vector<double> stage_busy_fraction;  // compute + LM head time / wall, mean over TP ranks (not kv_load/kv_export)
  std::vector<double> stage_busy_s;         // the same in seconds
  double bubble_measured = 0;               // mean over stages of 1 - busy fraction
  double bubble_ideal = 0;                  // (P-1)/(P-1+M)
};

RunSummary summarize(const sched::BatchPlan& plan, const std::vector<TimelineEvent>& events, int pp, int tp,
                     double wall_s, double model_flops);
// FLOPs with their unit scaled to the value, the number printed with `format`: "1.45 TFLOP".
std::string scaled_flops(double flops, const char* format);
// A FLOP rate so: "124.41 GFLOP/s", "2.95 PFLOP/s".
std::string flop_rate_text(double flops_per_s);

// When the stages' busy times differ by more than 15 % (and the busiest ran for a second or
// more), a `note:` with the partition that would
// even them out (model::suggested_partition, from these measured times); nothing otherwise.
void print_partition_advice(const RunSummary& summary, const std::vector<model::StageRange>& used, std::FILE* out);

// When a pipeline ran too few micro-batches to keep its stages busy (the bubble measured
// and ideal both over a fifth of the run, fixed chunks), a `note:` with the --chunk-size that
// would cut this batch into enough of them (M >= 9 (P-1): an ideal bubble of 10 % or less, the
// chunk halved at most down to 256 tokens); nothing otherwise. The default chunk (4,096) gives
// a 4K prompt one micro-batch, which leaves every stage but one idle. (run and simulate.)
void print_chunk_advice(const RunSummary& summary, const sched::BatchPlan& plan, const std::string& policy_used,
                        std::FILE* out);

// Lists at most `max_prompts` TTFTs (all of them are in the output file).
void print_summary(const RunSummary& summary, std::FILE* out, size_t max_prompts = 16);

}  // namespace pf::trace
