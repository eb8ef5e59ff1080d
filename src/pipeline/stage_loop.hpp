// The per-rank event loop: walk the batch plan, receive (or embed), compute, send on.
#pragma once

#include <vector>

#include "compute/stage_forward.hpp"
#include "dist/topology.hpp"
#include "io/prompts_h5.hpp"
#include "kvcache/paged_kv_pool.hpp"
#include "pipeline/logits_route.hpp"
#include "sched/batch_plan.hpp"
#include "trace/timeline.hpp"

namespace pf::pipeline {

struct StageLoopContext {
  const dist::Topology& topology;
  const model::ModelConfig& config;
  const sched::BatchPlan& plan;
  const io::PromptSet& prompts;  // token ids; only stage 0 reads them
  compute::CpuStageCompute& compute;
  kv::PagedKvPool& kv_pool;
  trace::Timeline& timeline;
  int ring_depth;   // receives posted ahead, and sends in flight, per rank
  LogitsSink sink;  // on world rank 0: stores one prompt's logits row
};

void run_stage_loop(StageLoopContext& context);

}  // namespace pf::pipeline
