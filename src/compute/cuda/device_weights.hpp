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

// A SwiGLU block's slice (a routed expert, the shared expert): [2 * width, H] and [H, width].
struct DeviceSwiglu {
  DeviceArray<bf16> gate_up, down;
};

// model::LayerWeights on the device, member for member (compute::weight_of reads both).
struct DeviceLayer {
  DeviceArray<bf16> input_norm, qkv, qkv_bias, q_norm, k_norm, o, post_norm, gate_up, down;
  // Multi-head latent attention (DeepSeek), instead of qkv / q_norm / k_norm.
  DeviceArray<bf16> q_a, q_a_norm, q_b, kv_a, kv_a_norm, kv_b;
  // Mixture of experts, instead of gate_up / down. The router, its correction bias and the
  // shared expert's gate stay float32: they decide which experts run, and the cpu backend
  // (and Hugging Face's DeepSeek) route in float32, so bf16 weights there could flip a choice.
  DeviceArray<float> router, router_bias, shared_gate;
  std::vector<DeviceSwiglu> experts;
  DeviceSwiglu shared;
};

struct DeviceWeights {
  int first_layer = 0;          // global index of layers[0] (which layers are MoE)
  DeviceArray<bf16> embedding;  // stage 0
  std::vector<DeviceLayer> layers;
  DeviceArray<bf16> final_norm, lm_head;  // last stage
  size_t bytes() const;

  static DeviceWeights upload(const model::StageWeights& host);
  // The same in parts, for a load that streams its layers (model::LayerSink): each layer as
  // it is read, then the stage's ends (embedding, final norm, LM head) and first layer.
  static DeviceLayer upload_layer(const model::LayerWeights& host);
  void upload_ends(const model::StageWeights& host);
  // Dense models only (benchmarks of Llama-like shapes): std::invalid_argument otherwise.
  static DeviceWeights random(const model::ModelConfig& config, const model::ShardSpec& shard, int num_layers,
                              bool first_stage, bool last_stage, uint64_t seed);
};

// Host float -> bf16 (io::float_to_bf16: round to nearest even, NaN kept a NaN).
std::vector<bf16> to_bf16(const std::vector<float>& values);

}  // namespace pf::cuda
