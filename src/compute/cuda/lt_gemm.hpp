// GEMMs of the CUDA backend through cuBLASLt: bf16 operands, float32 accumulation and
// float32 output (the residual stream and the inputs of the element-wise kernels stay
// float). One shape's descriptors and heuristic choice are made once and cached.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "device/device_array.hpp"
#include "kernels/kernels.hpp"

namespace pf::cuda {

// Several GEMMs of one shape in one call, item b on x + b * x_stride, w + b * w_stride,
// y + b * y_stride (elements), with rows of x and y x_ld and y_ld apart (0: packed). MLA's
// per-head absorption is one: each head's slice of kv_b against its columns of the queries.
struct GemmBatch {
  int count = 1;
  int64_t x_ld = 0, x_stride = 0;
  int64_t w_stride = 0;
  bool w_in_out = false;  // w_b stored [in, out] (y = x w) rather than Hugging Face's [out, in]
  int64_t y_ld = 0, y_stride = 0;
};

class LtGemm {
 public:
  explicit LtGemm(size_t workspace_bytes = 64ull << 20);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // y[rows, out] = x[rows, in] * w[out, in]^T (+ beta * y), all row-major, Hugging Face's
  // weight orientation. Enqueued on `stream`.
  void linear(const kernels::bf16* x, int rows, int in, const kernels::bf16* w, int out, float* y, cudaStream_t stream,
              float beta = 0.0f);
  // The same for each item of `batch` (beta 0).
  void linear_batched(const kernels::bf16* x, int rows, int in, const kernels::bf16* w, int out, float* y,
                      const GemmBatch& batch, cudaStream_t stream);

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  // rows, in, out, the batch's count, lds, strides and w layout, and the operands' alignment.
  using PlanKey = std::tuple<int, int, int, int, int64_t, int64_t, int64_t, bool, int64_t, int64_t, uint32_t>;
  const Plan& plan_for(int rows, int in, int out, const GemmBatch& batch, uint32_t alignment);
  void clear_plans();
  void run(const kernels::bf16* x, int rows, int in, const kernels::bf16* w, int out, float* y, const GemmBatch& batch,
           float beta, cudaStream_t stream);

  cublasLtHandle_t handle_ = nullptr;
  DeviceArray<unsigned char> workspace_;
  std::map<PlanKey, Plan> plans_;
};

}  // namespace pf::cuda
