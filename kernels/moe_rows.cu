// The row movements of a mixture-of-experts layer around its expert GEMMs: each expert's
// tokens gathered into consecutive rows (bf16, the gate_up GEMM's input), the experts'
// outputs weighted back into token order, and Qwen2-MoE's sigmoid-gated shared expert.
#include <cmath>

#include "common.cuh"
#include "kernels.hpp"

namespace pf::kernels {
namespace {

// One thread per (row, column).
__global__ void gather_expert_rows_kernel(const bf16* x, int hidden, const int32_t* slot_of, int slots, int k,
                                          bf16* rows) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= static_cast<int64_t>(slots) * hidden) return;
  const int64_t row = item / hidden;
  const int col = static_cast<int>(item % hidden);
  rows[item] = x[static_cast<int64_t>(slot_of[row] / k) * hidden + col];
}

// One thread per (token, column): the token's k expert outputs summed in choice order,
// without atomics (a token's sum does not depend on timing).
__global__ void combine_experts_kernel(const float* expert_out, int hidden, const int32_t* row_of_slot,
                                       const float* weight, int tokens, int k, float* out) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= static_cast<int64_t>(tokens) * hidden) return;
  const int64_t token = item / hidden;
  const int col = static_cast<int>(item % hidden);
  float sum = 0.0f;
  for (int i = 0; i < k; ++i) {
    const int64_t slot = token * k + i;
    sum += weight[slot] * expert_out[static_cast<int64_t>(row_of_slot[slot]) * hidden + col];
  }
  out[item] = sum;
}

// One block per row: the gate's dot product, then the gated add.
__global__ void add_sigmoid_gated_kernel(float* out, const float* src, const bf16* x, const float* gate, int hidden) {
  const int64_t row = blockIdx.x;
  const bf16* x_row = x + row * hidden;
  float part = 0.0f;
  for (int c = threadIdx.x; c < hidden; c += blockDim.x) part += __bfloat162float(x_row[c]) * gate[c];
  const float g = 1.0f / (1.0f + expf(-detail::block_sum(part)));
  for (int c = threadIdx.x; c < hidden; c += blockDim.x) out[row * hidden + c] += g * src[row * hidden + c];
}

}  // namespace

void gather_expert_rows(const bf16* x, int hidden, const int32_t* slot_of, int slots, int k, bf16* rows,
                        cudaStream_t stream) {
  const int64_t items = static_cast<int64_t>(slots) * hidden;
  if (items <= 0) return;
  PF_LAUNCH(gather_expert_rows_kernel, detail::blocks_for(items, 256), 256, 0, stream, x, hidden, slot_of, slots, k,
            rows);
}

void combine_experts(const float* expert_out, int hidden, const int32_t* row_of_slot, const float* weight,
                     int tokens, int k, float* out, cudaStream_t stream) {
  const int64_t items = static_cast<int64_t>(tokens) * hidden;
  if (items <= 0) return;
  PF_LAUNCH(combine_experts_kernel, detail::blocks_for(items, 256), 256, 0, stream, expert_out, hidden, row_of_slot,
            weight, tokens, k, out);
}

void add_sigmoid_gated(float* out, const float* src, const bf16* x, const float* gate, int rows, int hidden,
                       cudaStream_t stream) {
  if (rows <= 0) return;
  PF_LAUNCH(add_sigmoid_gated_kernel, rows, 256, 0, stream, out, src, x, gate, hidden);
}

}  // namespace pf::kernels
