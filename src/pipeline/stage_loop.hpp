// The per-rank event loop: walk the batch plan, receive (or embed), compute, send on.
#pragma once

#include <vector>

#include "compute/hidden_states.hpp"
#include "compute/stage_compute.hpp"
#include "dist/topology.hpp"
#include "dist/tp_all_reduce.hpp"
#include "dist/transport.hpp"
#include "io/prompts_h5.hpp"
#include "kvcache/kv_export.hpp"
#include "pipeline/checkpoint_run.hpp"
#include "pipeline/kv_store_setup.hpp"
#include "pipeline/progress.hpp"
#include "pipeline/result_route.hpp"
#include "sched/batch_plan.hpp"
#include "trace/timeline.hpp"
#include "trace/traffic.hpp"

namespace pf::pipeline {

// What the loop runs on come first: references of distinct types, so a mix-up does not
// compile. The values follow, each with a default, and are set by name.
struct StageLoopContext {
  const dist::Topology& topology;
  const sched::BatchPlan& plan;
  const io::PromptSet& prompts;  // token ids: stage 0 embeds them, the last stage scores them (--logprobs)
  compute::StageCompute& compute;
  dist::Transport& transport;  // hidden states to and from the neighbouring stages
  trace::Timeline& timeline;

  int hidden_size = 0;
  int vocab_size = 0;
  int ring_depth = 1;          // receives posted ahead, and sends in flight, per rank
  ResultSink* sink = nullptr;  // on world rank 0: stores the results (logits, hidden states, token rows)
  // The last stage also hands back each prompt's final-norm hidden state (--hidden-states)
  // and every position's scores (--logprobs, --top-k, --token-ids).
  compute::HiddenStatesKind hidden_states = compute::HiddenStatesKind::kNone;
  TokenRowLayout token_rows{};
  const std::vector<int32_t>* token_set = nullptr;  // --token-ids: token_rows.set_size ids (null: none)
  kv::KvExporter* kv_export = nullptr;              // --save-kv: every chunk's K/V goes to it
  // --kv-store: prefixes the plan loads come from it, and every chunk's K/V goes to its exporter.
  KvStoreRun* kv_store = nullptr;
  // Checkpoints inside a prompt (null where the backend cannot read its KV back): restores a
  // prompt, takes rank 0's calls, and on a stop checkpoints the prompt in flight.
  CheckpointRun* checkpoint = nullptr;
  ProgressReporter* progress = nullptr;  // world rank 0 only
  // World rank 0 polls it between micro-batches: set (by a SIGTERM/SIGUSR1 handler), it cuts
  // the plan at the next micro-batch, checkpointing the prompt in flight (without a
  // checkpoint, prompts already started finish); every rank is told.
  const volatile int* stop_requested = nullptr;
  // The backend's TP reducer (null when tp == 1 or emulated), read only: payload bytes, and
  // the host spans of reduces that block, which become the timeline's all-reduce events.
  dist::TpAllReduce* all_reduce = nullptr;
  // False for a backend that computes no results (the emulator): with CP its last stage's
  // ranks then skip gathering their rows, which only the results read.
  bool results_computed = true;
};

struct LoopResult {
  trace::TrafficCounters traffic;
  bool stopped = false;             // a graceful stop cut the plan short
  long long micro_batches_run = 0;  // the plan's first micro-batches this run ran: all but a stop's cut
};

LoopResult run_stage_loop(StageLoopContext& context);

}  // namespace pf::pipeline
