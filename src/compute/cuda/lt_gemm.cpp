// cuBLASLt GEMM (see lt_gemm.hpp).
//
// Row-major y[rows, out] = x w^T is, read column-major, y^T[out, rows] = w^T' x^T' with
// w stored [in, out] column-major: m = out, n = rows, k = in, A = w transposed (the "TN"
// layout cuBLASLt serves best), B = x, C = D = y^T. A w stored [in, out] row-major (y = x w)
// is already w^T column-major ([out, in], leading dimension out): A untransposed.
//
// The heuristic assumes 256-byte aligned operands unless told otherwise; slices (an
// expert's rows, a head's columns) are less aligned, so each plan is made for the alignment
// its operands actually have.
#include "compute/cuda/lt_gemm.hpp"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

namespace pf::cuda {
namespace {

constexpr size_t kMaxPlans = 4096;

// The largest power of two up to 256 dividing every address and byte stride given.
uint32_t alignment_of(std::initializer_list<uint64_t> values) {
  uint64_t bits = 256;
  for (uint64_t v : values) bits |= v;
  return static_cast<uint32_t>(bits & (~bits + 1));
}

}  // namespace

LtGemm::LtGemm(size_t workspace_bytes) : workspace_(workspace_bytes) {
  CUBLAS_CHECK(cublasLtCreate(&handle_));
}

LtGemm::~LtGemm() {
  clear_plans();
  if (handle_) cublasLtDestroy(handle_);
}

void LtGemm::clear_plans() {
  for (auto& [shape, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.op);
  }
  plans_.clear();
}

const LtGemm::Plan& LtGemm::plan_for(int rows, int in, int out, const GemmBatch& batch, uint32_t alignment) {
  const PlanKey key = std::make_tuple(rows, in, out, batch.count, batch.x_ld, batch.x_stride, batch.w_stride,
                                      batch.w_in_out, batch.y_ld, batch.y_stride, alignment);
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  // Experts' GEMMs have a new row count almost every time: a plan per count would pile up.
  if (plans_.size() >= kMaxPlans) clear_plans();
  Plan p;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transa = batch.w_in_out ? CUBLAS_OP_N : CUBLAS_OP_T, keep = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof(transa)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)));
  if (batch.w_in_out)
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, out, in, out));  // w^T as stored: [out, in]
  else
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, in, out, in));  // w as stored: [in, out]
  const int64_t x_ld = batch.x_ld > 0 ? batch.x_ld : in, y_ld = batch.y_ld > 0 ? batch.y_ld : out;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, in, rows, x_ld));  // x^T: [in, rows]
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, out, rows, y_ld));  // y^T: [out, rows]
  if (batch.count > 1) {
    const int32_t count = batch.count;
    const std::pair<cublasLtMatrixLayout_t, int64_t> strides[] = {
        {p.a, batch.w_stride}, {p.b, batch.x_stride}, {p.c, batch.y_stride}};
    for (const auto& [layout, stride] : strides) {
      CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                    sizeof(stride)));
    }
  }

  cublasLtMatmulPreference_t preference = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace = workspace_.bytes();
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                    sizeof(workspace)));
  for (const auto attribute : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                               CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &alignment, sizeof(alignment)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.c, p.c, preference, 1, &result, &found));
  cublasLtMatmulPreferenceDestroy(preference);
  if (found == 0)
    fail("cuBLASLt", "cublasLtMatmulAlgoGetHeuristic",
         "no algorithm for a " + std::to_string(rows) + "x" + std::to_string(in) + "x" + std::to_string(out) +
             " bf16 GEMM (batch " + std::to_string(batch.count) + ", alignment " + std::to_string(alignment) + ")",
         __FILE__, __LINE__);
  p.algo = result.algo;
  return plans_.emplace(key, p).first->second;
}

void LtGemm::run(const kernels::bf16* x, int rows, int in, const kernels::bf16* w, int out, float* y,
                 const GemmBatch& batch, float beta, cudaStream_t stream) {
  if (rows <= 0 || batch.count <= 0) return;
  const uint64_t bf16_bytes = sizeof(kernels::bf16), float_bytes = sizeof(float);
  const uint32_t alignment = alignment_of(
      {reinterpret_cast<uintptr_t>(x), reinterpret_cast<uintptr_t>(w), reinterpret_cast<uintptr_t>(y),
       static_cast<uint64_t>(batch.x_stride) * bf16_bytes, static_cast<uint64_t>(batch.w_stride) * bf16_bytes,
       static_cast<uint64_t>(batch.y_stride) * float_bytes});
  const Plan& p = plan_for(rows, in, out, batch, alignment);
  const float alpha = 1.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &p.algo, workspace_.data(),
                              workspace_.bytes(), stream));
}

void LtGemm::linear(const kernels::bf16* x, int rows, int in, const kernels::bf16* w, int out, float* y,
                    cudaStream_t stream, float beta) {
  run(x, rows, in, w, out, y, GemmBatch{}, beta, stream);
}

void LtGemm::linear_batched(const kernels::bf16* x, int rows, int in, const kernels::bf16* w, int out, float* y,
                            const GemmBatch& batch, cudaStream_t stream) {
  run(x, rows, in, w, out, y, batch, 0.0f, stream);
}

}  // namespace pf::cuda
