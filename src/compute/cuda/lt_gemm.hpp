// GEMMs of the CUDA backend through cuBLASLt: bf16 operands, float32 accumulation and
// float32 output (the residual stream and the inputs of the element-wise kernels stay
// float). One shape's descriptors and heuristic choice are made once and cached.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <tuple>

#include "device/device_array.hpp"
#include "kernels/kernels.hpp"

namespace pf::cuda {

class LtGemm {
 public:
  explicit LtGemm(size_t workspace_bytes = 64ull << 20);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // y[rows, out] = x[rows, in] * w[out, in]^T (+ beta * y), all row-major, Hugging Face's
  // weight orientation. Enqueued on `stream`.
  void linear(const kernels::bf16* x, int rows, int in, const kernels::bf16* w, int out, float* y,
              cudaStream_t stream, float beta = 0.0f);

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  const Plan& plan_for(int rows, int in, int out);

  cublasLtHandle_t handle_ = nullptr;
  DeviceArray<unsigned char> workspace_;
  std::map<std::tuple<int, int, int>, Plan> plans_;
};

}  // namespace pf::cuda
