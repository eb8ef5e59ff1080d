// The mixture-of-experts feed-forward of the cuda backend (the LayerOps route,
// routed_experts and shared_expert of compute/decoder_layer.hpp), the cpu backend's
// algorithm (compute/cpu/moe.cpp) on the device: the router kernel picks each token's
// experts, a counting sort groups the (token, choice) slots by expert, each expert's rows
// are gathered and run through two cuBLASLt GEMMs with SwiGLU between, and the outputs are
// weighted back into token order. Each TP rank runs its slice of every expert's width.
//
// The loop over experts is on the host, so it must know how many rows each expert got:
// routed_experts() copies those counts back and waits for them, once per MoE layer. That
// is the one place a forward waits for the device mid-way; grouped GEMMs whose row counts
// stay on the device would remove it.
#pragma once

#include <cuda_runtime.h>

#include <functional>

#include "compute/cuda/device_weights.hpp"
#include "compute/cuda/lt_gemm.hpp"
#include "device/device_array.hpp"
#include "model/config.hpp"
#include "model/weights.hpp"

namespace pf::cuda {

class MoeOnGpu {
 public:
  // `wait`: how the host waits for an event of the forward stream (the stage's waiter).
  MoeOnGpu(const model::ModelConfig& config, const model::ShardSpec& shard, std::function<void(cudaEvent_t)> wait);
  ~MoeOnGpu();
  MoeOnGpu(const MoeOnGpu&) = delete;
  MoeOnGpu& operator=(const MoeOnGpu&) = delete;

  // Workspace for chunks of up to `tokens` tokens.
  void reserve(int tokens);
  // Each token's experts and weights from x [tokens, hidden] (normed, bf16), kept for the next call.
  void route(const bf16* x, int tokens, const DeviceLayer& layer, cudaStream_t stream);
  // out [tokens, hidden] = sum over each token's experts of weight * expert(x), over the
  // experts this rank holds (ShardSpec: every expert's width slice, or whole experts with
  // --expert-split experts; the TP all-reduce adds the other ranks' part). Adds each expert's
  // row count (all experts, as routed) to rows_per_expert [experts].
  void routed_experts(const bf16* x, int tokens, const DeviceLayer& layer, LtGemm& gemm, float* out,
                      int64_t* rows_per_expert, cudaStream_t stream);
  // out += [sigmoid(x . gate) *] shared_expert(x).
  void shared_expert(const bf16* x, int tokens, const DeviceLayer& layer, LtGemm& gemm, float* out,
                     cudaStream_t stream);

 private:
  model::MoeConfig moe_;
  int hidden_, expert_width_, shared_width_;
  int expert_begin_, expert_count_;  // the routed experts this rank holds
  std::function<void(cudaEvent_t)> wait_;
  int reserved_tokens_ = 0;
  DeviceArray<int32_t> expert_, first_slot_, slot_of_, row_of_slot_;  // the routing, then its grouping
  DeviceArray<float> weight_;
  DeviceArray<bf16> rows_, activation_;      // grouped by expert: [tokens * k, hidden], [tokens * k, width]
  DeviceArray<float> gate_up_, expert_out_;  // [tokens * k, 2 * width], [tokens * k, hidden]
  int32_t* first_slot_host_ = nullptr;       // pinned
  cudaEvent_t counts_ready_ = nullptr;
};

}  // namespace pf::cuda
