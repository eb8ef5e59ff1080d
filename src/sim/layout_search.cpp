// The layout search (see layout_search.hpp).
#include "sim/layout_search.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "errors.hpp"
#include "kernels/attention_shapes.hpp"
#include "model/weights.hpp"
#include "sched/chunking_options.hpp"
#include "sim/simulated_run.hpp"
#include "sim/stage_costs.hpp"

namespace pf::sim {
namespace {

// One layout shape and what its devices need, before chunking is chosen.
struct Shape {
  int nodes, pp, cp, tp;
};

// The allocations searched: 1, 2, 4, ... nodes up to the whole allocation, and the whole.
std::vector<int> node_counts(int nodes) {
  std::vector<int> counts;
  for (int n = 1; n < nodes; n *= 2) counts.push_back(n);
  counts.push_back(nodes);
  return counts;
}

// A group of `width` consecutive devices inside one node, or whole nodes: block placement
// (TP innermost, then CP) keeps a TP group's all-reduces, and a stage's ring, off the
// slower link whenever the group fits a node.
bool packs_nodes(int width, int per_node) {
  return width <= per_node ? per_node % width == 0 : width % per_node == 0;
}

// The remainder of layers on the first stages instead of the last.
std::vector<model::StageRange> remainder_first(int layers, int pp) {
  std::vector<model::StageRange> partition(pp);
  int first = 0;
  for (int s = 0; s < pp; ++s) {
    partition[s] = {first, layers / pp + (s < layers % pp ? 1 : 0)};
    first += partition[s].count;
  }
  return partition;
}

int64_t batch_chunks(const std::vector<int64_t>& lengths, int64_t chunk) {
  int64_t chunks = 0;
  for (int64_t length : lengths) chunks += (length + chunk - 1) / chunk;
  return chunks;
}

// The nearest multiple of `multiple`, at least one, within the chunk bound `run` takes (in 64
// bits: 3 C* of a long prompt passes an int).
int round_to(double value, int multiple) {
  const int64_t rounded = std::llround(value / multiple) * static_cast<int64_t>(multiple);
  const int64_t bound = sched::kMaxChunkTokens / multiple * multiple;
  return static_cast<int>(std::clamp<int64_t>(rounded, multiple, bound));
}

std::string gibibytes(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / kGiB);
  return text;
}

class Search {
 public:
  explicit Search(const AdviseRequest& r) : r_(r), storage_(DeviceStorage::of(r.hardware, r.fp8_weights)) {
    for (int64_t length : r.lengths) longest_ = std::max(longest_, length);
    // Chunks shorter than the prompt, and not so short that a prompt takes more than
    // kMaxChunks of them (a search of seconds, not hours, at any length).
    // Nor so short that the batch takes more than kMaxBatchChunks.
    const int64_t shortest = (longest_ + kMaxChunks - 1) / kMaxChunks;
    for (int chunk : r.fixed_chunks) {
      const bool searched = chunk < longest_ && chunk >= shortest;
      if ((searched && batch_chunks(r.lengths, chunk) <= kMaxBatchChunks) || r.fixed_chunks.size() == 1)
        fixed_.push_back(chunk);
      else if (searched)
        batch_cut_ = chunk;  // the largest chunk the batch's size ruled out
    }
    // And the longest prompt in one chunk (no chunking: what a short prompt, or one whose
    // stages have no bubble to fill, runs best at), where `run` takes such a chunk.
    if (r.fixed_chunks.size() != 1 && longest_ <= sched::kMaxChunkTokens) fixed_.push_back(static_cast<int>(longest_));
    if (fixed_.empty())
      fixed_.push_back(round_to(static_cast<double>(std::min<int64_t>(longest_, std::max<int64_t>(shortest, 64))),
                                std::max(r.page_size, 64)));
  }

  void layout(const Shape& shape, Advice& advice) {
    ++advice.layouts_considered;
    const std::string name = layout_text(shape.pp, shape.cp, shape.tp) + " on " + std::to_string(shape.nodes) +
                             (shape.nodes == 1 ? " node" : " nodes");
    if (shape.cp > 1 &&
        2 * shape.cp > std::max(fixed_.back(), static_cast<int>(std::min<int64_t>(longest_, sched::kMaxChunkTokens)))) {
      advice.left_out.push_back({name, "more CP ranks than a chunk has tokens for (2 a rank)", ""});
      return;
    }
    std::vector<std::vector<model::StageRange>> partitions = {run_default_partition(r_, shape.pp)};
    if (r_.shape.num_layers % shape.pp != 0) partitions.push_back(remainder_first(r_.shape.num_layers, shape.pp));
    // The smallest chunk tried must fit, else nothing of this layout does.
    const DeviceMemory least = busiest_device(r_.shape, partitions[0], shape.tp, shape.cp, fixed_.front(), r_.page_size,
                                              longest_, storage_, r_.ring_depth, r_.scores);
    if (!fits_device(least, storage_)) {
      // When the batch's size ruled out the smaller chunks, those might have fit: say so
      // rather than blame the memory alone.
      const std::string cut = batch_cut_ > 0
                                  ? " at the chunks this batch's size lets the search simulate (" +
                                        std::to_string(fixed_.front()) + " and up: at " + std::to_string(batch_cut_) +
                                        " tokens it would take more than " + std::to_string(kMaxBatchChunks) +
                                        " chunks; advise a part of the batch with its mix of lengths)"
                                  : "";
      advice.left_out.push_back({name, "more than a device's memory" + cut,
                                 gibibytes(least.weights) + " of weights, " + gibibytes(least.kv) + " of KV and " +
                                     gibibytes(least.workspace) + " of workspace on stage " +
                                     std::to_string(least.stage) + "'s devices, " + gibibytes(storage_.memory_bytes) +
                                     " on one"});
      return;
    }
    // Step 1: the partition and the best fixed chunk.
    LayoutAdvice best;
    best.time_s = std::numeric_limits<double>::infinity();
    std::vector<StageCost> best_costs;
    for (const auto& partition : partitions) {
      const std::vector<StageCost> costs =
          analytic_stage_costs(r_.shape, r_.hardware, partition, shape.tp, r_.fp8_weights, r_.wire_bytes, {shape.cp});
      for (int chunk : fixed_) {
        LayoutAdvice a;
        if (!simulate(shape, partition, costs, {false, chunk, 0.0}, a, advice)) continue;
        if (a.time_s < best.time_s) {
          best = a;
          best_costs = costs;
        }
      }
    }
    if (!std::isfinite(best.time_s)) return;
    best.best_fixed_chunk = best.chunking.chunk;
    best.best_fixed_time_s = best.time_s;
    // Step 2: dynamic chunking from C0 = 2-3 x C*, the smooth factor swept.
    const int align = std::max(r_.page_size, 64);
    for (double multiple : r_.tune_dynamic ? r_.initial_multiples : std::vector<double>{}) {
      const int initial = round_to(multiple * best.best_fixed_chunk, align);
      for (double smooth : r_.smooth_factors) {
        LayoutAdvice a;
        if (!simulate(shape, best.partition, best_costs, {true, initial, smooth}, a, advice)) continue;
        if (a.time_s < best.time_s) {
          a.best_fixed_chunk = best.best_fixed_chunk;
          a.best_fixed_time_s = best.best_fixed_time_s;
          best = a;
        }
      }
    }
    advice.ranked.push_back(best);
  }

 private:
  bool simulate(const Shape& shape, const std::vector<model::StageRange>& partition,
                const std::vector<StageCost>& costs, const ChunkChoice& chunking, LayoutAdvice& out, Advice& advice) {
    // A zigzag piece for every CP rank (run takes shorter chunks, leaving ranks idle: not a
    // layout to advise). Without CP any chunk of a token or more.
    if (shape.cp > 1 && chunking.chunk < 2 * shape.cp) return false;
    const DeviceMemory memory = busiest_device(r_.shape, partition, shape.tp, shape.cp, chunking.chunk, r_.page_size,
                                               longest_, storage_, r_.ring_depth, r_.scores);
    if (!fits_device(memory, storage_)) return false;
    SimulatedRunSpec spec;
    spec.pp = shape.pp;
    spec.cp = shape.cp;
    spec.tp = shape.tp;
    spec.hidden_size = r_.shape.hidden_size;
    spec.chunking.policy = chunking.dynamic ? sched::ChunkPolicyKind::kSglang : sched::ChunkPolicyKind::kFixed;
    spec.chunking.initial_chunk = chunking.chunk;
    spec.chunking.smooth_factor = chunking.dynamic ? chunking.smooth : spec.chunking.smooth_factor;
    spec.chunking.page_size = r_.page_size;
    spec.lengths = r_.lengths;
    spec.ring_depth = r_.ring_depth;
    spec.wire_bytes = r_.wire_bytes;
    spec.scores = r_.scores;
    spec.score_from = r_.score_from;
    spec.prefixes = r_.prefixes;
    for (int s = 0; s + 1 < shape.pp; ++s) spec.links.push_back(stage_link(r_.hardware, s, shape.tp, shape.cp));
    const SimulatedRun run = simulate_run(spec, costs);
    ++advice.simulations;
    if (chunking.dynamic && run.policy_used == "fixed") return false;  // the fit failed: the fixed case covers it

    out.nodes = shape.nodes;
    out.pp = shape.pp;
    out.cp = shape.cp;
    out.tp = shape.tp;
    out.partition = partition;
    out.chunking = chunking;
    out.time_s = run.result.makespan_s;
    double ttft = 0;
    for (double t : run.summary.ttft_s) ttft += t;
    out.mean_ttft_s = run.summary.ttft_s.empty() ? 0 : ttft / run.summary.ttft_s.size();
    out.tokens_per_s = run.summary.tokens_per_s;
    out.bubble = run.summary.bubble_measured;
    out.bubble_ideal = run.summary.bubble_ideal;
    out.micro_batches = run.summary.num_micro_batches;
    out.memory = memory;
    out.cross_node_bytes = cross_node_bytes(shape, costs, run);
    return true;
  }

  // Bytes that leave a node: stage hand-offs between nodes, the CP ring once a stage's
  // cp x tp devices span nodes, TP all-reduces once a TP group does (all of its ring traffic).
  double cross_node_bytes(const Shape& shape, const std::vector<StageCost>& costs, const SimulatedRun& run) const {
    const int per_node = r_.devices_per_node, width = shape.cp * shape.tp;
    double bytes = 0;
    for (int s = 0; s + 1 < shape.pp; ++s)
      if (s * width / per_node != (s + 1) * width / per_node) bytes += run.result.boundary_bytes[s];
    if (width > per_node && shape.cp > 1) {
      // pass-KV sends to the next CP rank: the hops whose two ends sit on different nodes;
      // pass-Q's all-to-all sends to every other: the pairs on different nodes.
      // A node holds `together` consecutive CP ranks (the ring spans nodes here, so at least 2
      // nodes): one hop in `together` leaves it, and a rank's other cp - together peers are away.
      const double together = shape.tp <= per_node ? per_node / shape.tp : 1;
      const double hop_share = 1.0 / together;
      const double pair_share = (shape.cp - together) / (shape.cp - 1.0);
      for (const StageCost& stage : costs)
        for (const auto& mb : run.plan.micro_batches) {
          const CpLayerStep step = stage.cp.layer_step(static_cast<double>(mb.start), mb.length);
          bytes += stage.cp.layers * step.bytes_sent * shape.cp * shape.tp *
                   (step.variant == CpAttention::kPassKv ? hop_share : pair_share);
        }
    }
    if (shape.tp > per_node) {
      double computed = 0;
      for (const auto& mb : run.plan.micro_batches) computed += mb.length;
      bytes += computed * r_.shape.num_layers * 4.0 * (shape.tp - 1) * r_.shape.hidden_size * r_.wire_bytes;
    }
    return bytes;
  }

  const AdviseRequest& r_;
  const DeviceStorage storage_;
  int64_t longest_ = 0;
  std::vector<int> fixed_;
  int batch_cut_ = 0;  // the largest searched chunk left out for the batch's chunk count (0: none)
};

}  // namespace

std::vector<model::StageRange> run_default_partition(const AdviseRequest& request, int pp) {
  std::vector<int64_t> scored;  // run's count: the rows from each prompt's first scored one
  if (request.scores)
    for (size_t p = 0; p < request.lengths.size(); ++p)
      scored.push_back(request.lengths[p] - (p < request.score_from.size() ? request.score_from[p] : 0));
  return model::run_default_partition(request.shape, pp, request.lengths, scored);
}

std::string layout_text(int pp, int cp, int tp) {
  return "pp " + std::to_string(pp) + (cp > 1 ? " x cp " + std::to_string(cp) : "") + " x tp " + std::to_string(tp);
}

Advice advise_layouts(const AdviseRequest& request) {
  if (request.nodes < 1 || request.nodes > kMaxNodes || request.devices_per_node < 1 ||
      request.devices_per_node > kMaxDevicesPerNode)
    throw UserError("--nodes must be 1-" + std::to_string(kMaxNodes) + " and --gpus-per-node 1-" +
                    std::to_string(kMaxDevicesPerNode));
  if (request.lengths.empty()) throw UserError("no prompts to advise on");
  for (int64_t length : request.lengths)
    if (length < 1 || length > kMaxPromptTokens)
      throw UserError("a prompt of " + std::to_string(length) + " tokens: advise takes 1 to " +
                      std::to_string(kMaxPromptTokens) + " tokens a prompt");
  if (static_cast<int64_t>(request.lengths.size()) > kMaxBatchChunks)
    throw UserError("a batch of " + std::to_string(request.lengths.size()) + " prompts: advise simulates up to " +
                    std::to_string(kMaxBatchChunks) +
                    " chunks a run (give it a part of the batch with its mix of "
                    "lengths: the ranking is per token)");
  if (request.fixed_chunks.size() == 1) {
    const int chunk = request.fixed_chunks[0];
    const int64_t chunks = chunk > 0 ? batch_chunks(request.lengths, chunk) : 0;
    if (chunk < 1 || chunks > kMaxBatchChunks)
      throw UserError("--chunk-size " + std::to_string(chunk) + " cuts the batch into " + std::to_string(chunks) +
                      " chunks: advise simulates up to " + std::to_string(kMaxBatchChunks) +
                      " (a larger chunk, or leave --chunk-size out to search)");
  }
  if (!request.hardware.cpu && !request.shape.mla() && !kernels::attention_head_dim_supported(request.shape.head_dim))
    throw UserError("the cuda backend's attention takes head_dim " + std::string(kernels::kAttentionHeadDims) +
                    " (this model: " + std::to_string(request.shape.head_dim) + "): no GPU layout can run it");
  if (!request.hardware.cpu && request.page_size % kernels::kAttentionKeyTile != 0)
    throw UserError("--page-size " + std::to_string(request.page_size) + ": the cuda backend needs a multiple of " +
                    std::to_string(kernels::kAttentionKeyTile));
  AdviseRequest r = request;
  r.hardware.devices_per_node = r.devices_per_node;  // the links follow the allocation's nodes
  Advice advice;
  Search search(r);
  const int per_node = r.devices_per_node;
  for (int nodes : node_counts(request.nodes)) {
    const int devices = nodes * per_node;
    for (int tp = 1; tp <= devices; ++tp) {
      if (devices % tp != 0 || !packs_nodes(tp, per_node) || !model::tensor_parallel_divides(request.shape, tp))
        continue;
      for (int cp = 1; cp <= devices / tp; ++cp) {
        if ((devices / tp) % cp != 0 || !packs_nodes(cp * tp, per_node)) continue;
        const int pp = devices / (tp * cp);
        if (pp > request.shape.num_layers) continue;
        search.layout({nodes, pp, cp, tp}, advice);
      }
    }
  }
  if (advice.ranked.empty()) {
    std::string why = "no layout is possible";
    if (!advice.left_out.empty()) {
      const Advice::LeftOut& largest = advice.left_out.back();  // of the whole allocation
      why = largest.layout + ": " + largest.reason + (largest.detail.empty() ? "" : ", " + largest.detail);
    }
    throw UserError("no layout of " + std::to_string(request.nodes) + " x " + std::to_string(per_node) +
                    " devices fits this model and batch (" + why + ")");
  }
  std::sort(advice.ranked.begin(), advice.ranked.end(), [](const LayoutAdvice& a, const LayoutAdvice& b) {
    if (a.time_s != b.time_s) return a.time_s < b.time_s;
    return a.gpus() < b.gpus();
  });
  advice.base_nodes = std::numeric_limits<int>::max();
  for (const auto& a : advice.ranked) advice.base_nodes = std::min(advice.base_nodes, a.nodes);
  double base_time = std::numeric_limits<double>::infinity();
  for (const auto& a : advice.ranked)
    if (a.nodes == advice.base_nodes) base_time = std::min(base_time, a.time_s);
  for (auto& a : advice.ranked) a.efficiency = base_time * advice.base_nodes / (a.time_s * a.nodes);
  return advice;
}

}  // namespace pf::sim
