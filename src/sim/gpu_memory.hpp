// What a layout puts on each device: its share of the weights, of a prompt's KV cache and a
// chunk's working buffers; `pipefill advise` keeps the layouts whose busiest device holds them.
#pragma once

#include <cstdint>
#include <vector>

#include "model/layer_partition.hpp"
#include "model/model_shape.hpp"

namespace pf::sim {

struct DeviceMemory {
  double weights = 0;    // bytes: the stage's layers' share on one TP rank, embedding or LM head
  double kv = 0;         // bytes: the longest prompt's KV for the stage's layers, one CP rank's share
  double workspace = 0;  // bytes: one chunk's activations on one rank, plus the runtime's fixed buffers
  int stage = 0;         // the stage this device serves
  double total() const { return weights + kv + workspace; }
};

// What the backend and runtime hold outside the model: the CUDA context, cuBLASLt's workspace
// and NCCL's buffers (an estimate: about 1.5 GiB on Hopper with a few communicators).
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kRuntimeBytes = 1.5 * kGiB;

// The device of the stage that needs the most. Weights are bf16 (2 bytes a parameter: the
// cuda backend dequantizes FP8 checkpoints at load) or 1 byte with `fp8_weights`; the KV
// cache is bf16; activations float32. Experts are split by width over TP (every rank holds a
// slice of every expert), the router and MLA's down-projections whole on every rank; the
// embedding sits on stage 0, the LM head sliced by vocabulary on the last stage.
DeviceMemory busiest_device(const model::ModelShape& shape, const std::vector<model::StageRange>& partition, int tp,
                            int cp, int chunk_tokens, int64_t longest_prompt, bool fp8_weights);

// Whether it fits a device of `device_bytes`, as `run --backend cuda` would place it: the KV
// pool gets --kv-memory-fraction (0.85 by default) of what weights and workspace leave.
bool fits_device(const DeviceMemory& memory, double device_bytes, double kv_memory_fraction = 0.85);

}  // namespace pf::sim
