// What a layout puts on each device: its share of the weights, of a prompt's KV cache and of
// the backend's working buffers, by the rules `run` itself sizes them with; `pipefill advise`
// keeps the layouts whose busiest device holds them.
#pragma once

#include <cstdint>
#include <vector>

#include "model/layer_partition.hpp"
#include "model/model_shape.hpp"
#include "sim/hardware.hpp"

namespace pf::sim {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct DeviceMemory {
  double weights = 0;    // bytes: the stage's layers' share on one TP rank, embedding or LM head
  double kv = 0;         // bytes: the longest prompt's KV for the stage's layers, one CP rank's share
  double workspace = 0;  // bytes: the backend's buffers for its longest chunk, the CP ring's, the runtime's
  int stage = 0;         // the stage this device serves
  double total() const { return weights + kv + workspace; }
};

// How a backend stores things, per device.
struct DeviceStorage {
  double weight_bytes = 2;     // a parameter: bf16 on cuda (FP8 checkpoints dequantized at load), 1 kept in FP8
  double embedding_bytes = 2;  // the embedding and LM head: bf16 even in an FP8 checkpoint
  double kv_bytes = 2;         // a cached value: bf16 on cuda, float32 on the cpu backend
  double runtime_bytes = 0;    // outside the model: CUDA context, cuBLASLt workspace, NCCL buffers
  double memory_bytes = 0;     // what one device (cpu: one rank's share of the node) has; 0: unknown
  static DeviceStorage of(const HardwareSpec& hw, bool fp8_weights);
};

// The device of the stage that needs the most, for chunks up to C0 = `initial_chunk`:
//  - weights: experts split by width over TP (every rank a slice of every expert), the router
//    and MLA's down-projections whole on every rank; the embedding on stage 0, the LM head
//    sliced by vocabulary on the last;
//  - KV: the rows a CP rank holds of the longest prompt (sched::cp_shard_bound: what `run`
//    sizes its pool for, sched::cp_shard_lengths, when a chunk has at least 2 cp tokens), the
//    latent whole on every TP rank, K and V split by head otherwise;
//  - workspace: float32 activations of the longest chunk a plan can hold
//    (sched::longest_chunk, every CP rank's buffers are that size), the hidden-state slots
//    the stage's loop holds at once with `ring_depth` (sched/hidden_slots.hpp), and with CP
//    the ring's two shards of a layer and pass-Q's gathered queries and partials.
// With CP the last stage's CP rank 0 gathers a whole chunk for per-token `scores` (twice:
// into its slot and a buffer), else a prompt's last row (sched/hidden_slots.hpp).
DeviceMemory busiest_device(const model::ModelShape& shape, const std::vector<model::StageRange>& partition, int tp,
                            int cp, int initial_chunk, int page_size, int64_t longest_prompt,
                            const DeviceStorage& storage, int ring_depth, bool scores);

// Whether it fits, as the cuda backend would place it: the KV pool gets --kv-memory-fraction
// (0.85 by default) of what weights and workspace leave. Always true when memory is unknown.
bool fits_device(const DeviceMemory& memory, const DeviceStorage& storage, double kv_memory_fraction = 0.85);

}  // namespace pf::sim
