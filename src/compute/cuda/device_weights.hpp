// One rank's weights on the device, in bf16: the stage's layers and this TP rank's shard
// only (the host loader already sliced them). Either uploaded from the loaded StageWeights,
// or, for benchmarks of large shapes, filled on the device with the same value ranges as
// the synthetic presets (no host-side generation of billions of floats).
#pragma once

#include <cstdint>
#include <vector>

#include "device/device_array.hpp"
#include "kernels/kernels.hpp"
#include "model/config.hpp"
#include "model/weights.hpp"

namespace pf::cuda {

using kernels::bf16;

struct DeviceLayer {
  DeviceArray<bf16> input_norm, qkv, qkv_bias, q_norm, k_norm, o, post_norm, gate_up, down;
};

struct DeviceWeights {
  DeviceArray<bf16> embedding;  // stage 0
  std::vector<DeviceLayer> layers;
  DeviceArray<bf16> final_norm, lm_head;  // last stage
  size_t bytes() const;

  static DeviceWeights upload(const model::StageWeights& host);
  static DeviceWeights random(const model::ModelConfig& config, const model::ShardSpec& shard, int num_layers,
                              bool first_stage, bool last_stage, uint64_t seed);
};

// Host float -> bf16 (io::float_to_bf16: round to nearest even, NaN kept a NaN).
std::vector<bf16> to_bf16(const std::vector<float>& values);

}  // namespace pf::cuda
