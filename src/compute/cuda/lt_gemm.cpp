// cuBLASLt GEMM (see lt_gemm.hpp).
//
// Row-major y[rows, out] = x w^T is, read column-major, y^T[out, rows] = w^T' x^T' with
// w stored [in, out] column-major: m = out, n = rows, k = in, A = w transposed (the "TN"
// layout cuBLASLt serves best), B = x, C = D = y^T.
#include "compute/cuda/lt_gemm.hpp"

#include <cstdint>
#include <string>

namespace pf::cuda {

LtGemm::LtGemm(size_t workspace_bytes) : workspace_(workspace_bytes) { CUBLAS_CHECK(cublasLtCreate(&handle_)); }

LtGemm::~LtGemm() {
  for (auto& [shape, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.op);
  }
  if (handle_) cublasLtDestroy(handle_);
}

const LtGemm::Plan& LtGemm::plan_for(int rows, int in, int out) {
  const auto key = std::make_tuple(rows, in, out);
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan p;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, in, out, in));    // w as stored: [in, out]
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, in, rows, in));   // x^T: [in, rows]
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, out, rows, out));  // y^T: [out, rows]

  cublasLtMatmulPreference_t preference = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace = workspace_.bytes();
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                    sizeof(workspace)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.c, p.c, preference, 1, &result, &found));
  cublasLtMatmulPreferenceDestroy(preference);
  if (found == 0)
    fail("cuBLASLt", "cublasLtMatmulAlgoGetHeuristic", "no algorithm for a " + std::to_string(rows) + "x" +
                                                           std::to_string(in) + "x" + std::to_string(out) + " bf16 GEMM",
         __FILE__, __LINE__);
  p.algo = result.algo;
  return plans_.emplace(key, p).first->second;
}

void LtGemm::linear(const kernels::bf16* x, int rows, int in, const kernels::bf16* w, int out, float* y,
                    cudaStream_t stream, float beta) {
  if (rows <= 0) return;
  const Plan& p = plan_for(rows, in, out);
  const float alpha = 1.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &p.algo,
                              workspace_.data(), workspace_.bytes(), stream));
}

}  // namespace pf::cuda
