// The per-rank event loop: walk the batch plan, receive (or embed), compute, send on.
#pragma once

#include <vector>

#include "compute/stage_compute.hpp"
#include "dist/topology.hpp"
#include "dist/transport.hpp"
#include "io/prompts_h5.hpp"
#include "pipeline/logits_route.hpp"
#include "pipeline/progress.hpp"
#include "sched/batch_plan.hpp"
#include "trace/timeline.hpp"

namespace pf::pipeline {

struct StageLoopContext {
  const dist::Topology& topology;
  int hidden_size;
  int vocab_size;
  const sched::BatchPlan& plan;
  const io::PromptSet& prompts;  // token ids; only stage 0 reads them
  compute::StageCompute& compute;
  dist::Transport& transport;  // hidden states to and from the neighbouring stages
  trace::Timeline& timeline;
  int ring_depth;   // receives posted ahead, and sends in flight, per rank
  LogitsSink sink;  // on world rank 0: stores one prompt's logits row
  ProgressReporter* progress = nullptr;  // world rank 0 only
  // World rank 0 polls it between micro-batches: set (by a SIGTERM/SIGUSR1 handler), it
  // stops issuing new prompts; prompts already started finish, every rank is told.
  const volatile int* stop_requested = nullptr;
};

// Bytes this rank moved: hidden states sent to the next stage, and payload handed to the
// TP all-reduce (the summary compares them with the seed's volume formulas).
struct TrafficCounters {
  double p2p_bytes_sent = 0;
  double allreduce_payload_bytes = 0;
};

struct LoopResult {
  TrafficCounters traffic;
  bool stopped = false;  // a graceful stop cut the plan short
};

LoopResult run_stage_loop(StageLoopContext& context);

}  // namespace pf::pipeline
