// `pipefill advise`'s search: every pp x cp x tp layout an allocation (and each power-of-two
// share of its nodes) can run, each with the chunking the source texts' tuning path finds,
// simulated (simulated_run.hpp) and ranked by the time the batch takes.
//
// The tuning path, per layout: the best of a few fixed chunk sizes (C*); then SGLang's
// dynamic chunking with the initial chunk C0 at 2, 2.5 and 3 times C*, each with the smooth
// factor swept over 0.60-0.85; the layer partition as `run` makes it (the remainder on the
// last stages), or the remainder on the first stages when that is faster. Layouts and chunks
// whose busiest device does not hold its weights, KV and workspace (gpu_memory.hpp) are left
// out, and so are the ones `run` would refuse.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/layer_partition.hpp"
#include "model/model_shape.hpp"
#include "sched/batch_plan.hpp"
#include "sim/gpu_memory.hpp"
#include "sim/hardware.hpp"

namespace pf::sim {

// Bounds that keep a search to seconds and its arithmetic exact.
constexpr int kMaxNodes = 4096;
constexpr int64_t kMaxPromptTokens = int64_t{1} << 34;  // 16G tokens
constexpr int64_t kMaxChunks = 1024;                    // of the longest prompt, per searched fixed chunk
constexpr int64_t kMaxBatchChunks = 16 * kMaxChunks;    // of the whole batch, per simulation

struct AdviseRequest {
  model::ModelShape shape;
  HardwareSpec hardware;
  int nodes = 1;
  int devices_per_node = 8;
  std::vector<int64_t> lengths;
  bool fp8_weights = false;  // keep an FP8 checkpoint in FP8 (matmuls at the fp8 rate)
  int wire_bytes = 4;
  int ring_depth = 4;
  bool scores = false;  // per-token scores: the LM head on every row, CP's gather of every row
  // With scores: each prompt's first scored row (an input's spans); empty: 0.
  std::vector<int64_t> score_from;
  // An input's prompts (--input): their shared prefixes, computed once as `run` does by
  // default (sched::find_shared_prefixes at page_size). Empty: none shared.
  sched::PrefixPlan prefixes;
  int page_size = 64;
  std::vector<int> fixed_chunks = {1024, 2048, 4096, 6144, 8192, 12288, 16384, 24576, 32768};
  bool tune_dynamic = true;  // the tuning path's second step (off: fixed chunks only)
  std::vector<double> initial_multiples = {2.0, 2.5, 3.0};
  std::vector<double> smooth_factors = {0.60, 0.65, 0.70, 0.75, 0.80, 0.85};
};

// The partition `run` takes for this request's batch at pp stages when none is given (the
// job line pins another with --layer-partition).
std::vector<model::StageRange> run_default_partition(const AdviseRequest& request, int pp);

struct ChunkChoice {
  bool dynamic = false;  // SGLang's dynamic chunking, C0 = chunk
  int chunk = 0;
  double smooth = 0;
};

struct LayoutAdvice {
  int nodes = 1, pp = 1, cp = 1, tp = 1;
  std::vector<model::StageRange> partition;
  ChunkChoice chunking;
  int best_fixed_chunk = 0;      // C*, the tuning path's first step
  double best_fixed_time_s = 0;  // the layout's time with fixed chunks of C*
  double time_s = 0;             // the batch, first chunk in to last logits out
  double mean_ttft_s = 0;
  double tokens_per_s = 0;
  double bubble = 0;            // mean over stages of the idle share
  double bubble_ideal = 0;      // (P - 1) / (P - 1 + M)
  double efficiency = 0;        // strong scaling against the smallest allocation that fits
  double cross_node_bytes = 0;  // stage hand-offs, CP ring and TP all-reduces that leave a node
  int micro_batches = 0;
  DeviceMemory memory;
  int gpus() const { return pp * cp * tp; }
};

struct Advice {
  std::vector<LayoutAdvice> ranked;  // fastest first; on a tie, fewer devices first
  int base_nodes = 0;                // the allocation efficiencies are measured against
  int layouts_considered = 0;        // pp x cp x tp shapes looked at
  int simulations = 0;
  struct LeftOut {
    std::string layout;  // "pp 1 x tp 8 on 1 node"
    std::string reason;  // one line per kind: "does not fit a device's memory"
    std::string detail;  // "83.5 GiB of weights, ... 96.0 GiB on one"
  };
  std::vector<LeftOut> left_out;
};

// UserError when nothing fits (the message says what the whole allocation's last layout
// needs), for bounds beyond the k* constants, and for a model or page size the cuda backend
// cannot run on GPU hardware.
Advice advise_layouts(const AdviseRequest& request);

// "pp 4 x tp 8", "pp 2 x cp 4 x tp 4".
std::string layout_text(int pp, int cp, int tp);

}  // namespace pf::sim
