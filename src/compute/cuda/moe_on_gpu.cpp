// Mixture of experts on the GPU (see moe_on_gpu.hpp).
#include "compute/cuda/moe_on_gpu.hpp"

#include <algorithm>

#include "kernels/kernels.hpp"

namespace pf::cuda {

MoeOnGpu::MoeOnGpu(const model::ModelConfig& config, const model::ShardSpec& shard,
                   std::function<void(cudaEvent_t)> wait)
    : moe_(config.moe),
      hidden_(config.hidden_size),
      expert_width_(shard.expert_intermediate),
      shared_width_(shard.shared_intermediate),
      expert_begin_(shard.expert_begin),
      expert_count_(shard.expert_count),
      wait_(std::move(wait)) {
  first_slot_.ensure(static_cast<size_t>(moe_.experts) + 1);
  CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&first_slot_host_), sizeof(int32_t) * (moe_.experts + 1)));
  CUDA_CHECK(cudaEventCreateWithFlags(&counts_ready_, cudaEventDisableTiming));
}

MoeOnGpu::~MoeOnGpu() {
  if (first_slot_host_) cudaFreeHost(first_slot_host_);
  if (counts_ready_) cudaEventDestroy(counts_ready_);
}

void MoeOnGpu::reserve(int tokens) {
  if (tokens <= reserved_tokens_) return;
  const size_t t = tokens, slots = t * moe_.experts_per_token, h = hidden_;
  const size_t e = expert_width_, s = shared_width_;
  expert_.ensure(slots);
  weight_.ensure(slots);
  slot_of_.ensure(slots);
  row_of_slot_.ensure(slots);
  rows_.ensure(slots * h);
  // The routed experts' rows, or the shared expert's (every token), whichever is wider.
  gate_up_.ensure(std::max(slots * 2 * e, t * 2 * s));
  activation_.ensure(std::max(slots * e, t * s));
  expert_out_.ensure(slots * h);
  reserved_tokens_ = tokens;
}

void MoeOnGpu::route(const bf16* x, int tokens, const DeviceLayer& layer, cudaStream_t stream) {
  kernels::RouterArgs a;
  a.x = x;
  a.tokens = tokens;
  a.hidden = hidden_;
  a.weight = layer.router.data();
  a.correction_bias = layer.router_bias.empty() ? nullptr : layer.router_bias.data();
  a.experts = moe_.experts;
  a.k = moe_.experts_per_token;
  a.sigmoid_grouped = moe_.router == model::Router::kSigmoidGrouped;
  a.groups = moe_.groups;
  a.topk_groups = moe_.topk_groups;
  a.renormalize = moe_.norm_topk_prob;
  a.scaling = static_cast<float>(moe_.routed_scaling_factor);
  a.expert = expert_.data();
  a.expert_weight = weight_.data();
  kernels::route_tokens(a, stream);
  CUDA_CHECK_LAUNCH();
}

void MoeOnGpu::routed_experts(const bf16* x, int tokens, const DeviceLayer& layer, LtGemm& gemm, float* out,
                              int64_t* rows_per_expert, cudaStream_t stream) {
  const int k = moe_.experts_per_token, slots = tokens * k, h = hidden_, width = expert_width_;
  kernels::group_by_expert(expert_.data(), slots, moe_.experts, first_slot_.data(), slot_of_.data(),
                           row_of_slot_.data(), stream);
  // The counts go to the host while the device gathers the rows.
  CUDA_CHECK(cudaMemcpyAsync(first_slot_host_, first_slot_.data(), sizeof(int32_t) * (moe_.experts + 1),
                             cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaEventRecord(counts_ready_, stream));
  kernels::gather_expert_rows(x, h, slot_of_.data(), slots, k, rows_.data(), stream);
  CUDA_CHECK_LAUNCH();
  wait_(counts_ready_);

  for (int e = 0; e < moe_.experts; ++e) rows_per_expert[e] += first_slot_host_[e + 1] - first_slot_host_[e];

  // The slots of the experts this rank holds are contiguous (grouped by expert): the others'
  // outputs are zero here (--expert-split experts: their ranks add them in the all-reduce).
  const int begin = expert_begin_, end = expert_begin_ + expert_count_;
  const int64_t local_first = first_slot_host_[begin], local_end = first_slot_host_[end];
  if (local_first > 0) CUDA_CHECK(cudaMemsetAsync(expert_out_.data(), 0, sizeof(float) * local_first * h, stream));
  if (local_end < slots)
    CUDA_CHECK(cudaMemsetAsync(expert_out_.data() + local_end * h, 0, sizeof(float) * (slots - local_end) * h, stream));
  // Each expert with tokens: its rows through gate_up, in place in the grouped buffers.
  for (int e = begin; e < end; ++e) {
    const int64_t first = first_slot_host_[e], count = first_slot_host_[e + 1] - first;
    if (count > 0)
      gemm.linear(rows_.data() + first * h, static_cast<int>(count), h, layer.experts[e - begin].gate_up.data(),
                  2 * width, gate_up_.data() + first * 2 * width, stream);
  }
  if (local_end > local_first)  // every local expert's rows at once
    kernels::swiglu(gate_up_.data() + local_first * 2 * width, static_cast<int>(local_end - local_first), width,
                    activation_.data() + local_first * width, stream);
  for (int e = begin; e < end; ++e) {
    const int64_t first = first_slot_host_[e], count = first_slot_host_[e + 1] - first;
    if (count > 0)
      gemm.linear(activation_.data() + first * width, static_cast<int>(count), width,
                  layer.experts[e - begin].down.data(), h, expert_out_.data() + first * h, stream);
  }
  kernels::combine_experts(expert_out_.data(), h, row_of_slot_.data(), weight_.data(), tokens, k, out, stream);
  CUDA_CHECK_LAUNCH();
}

void MoeOnGpu::shared_expert(const bf16* x, int tokens, const DeviceLayer& layer, LtGemm& gemm, float* out,
                             cudaStream_t stream) {
  const int h = hidden_, width = shared_width_;
  gemm.linear(x, tokens, h, layer.shared.gate_up.data(), 2 * width, gate_up_.data(), stream);
  kernels::swiglu(gate_up_.data(), tokens, width, activation_.data(), stream);
  if (layer.shared_gate.empty()) {  // DeepSeek: added as it is, by the GEMM itself
    gemm.linear(activation_.data(), tokens, width, layer.shared.down.data(), h, out, stream, /*beta=*/1.0f);
  } else {  // Qwen2-MoE: scaled by a per-token sigmoid gate first
    gemm.linear(activation_.data(), tokens, width, layer.shared.down.data(), h, expert_out_.data(), stream);
    kernels::add_sigmoid_gated(out, expert_out_.data(), x, layer.shared_gate.data(), tokens, h, stream);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace pf::cuda
