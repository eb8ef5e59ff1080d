// The cuBLASLt calls pipefill makes, on the simulated device, as cuBLASLt documents them:
// D = alpha op(A) op(B) + beta C, every matrix column-major unless its layout's ORDER says
// row-major, op(X) = X or its transpose (MATMUL_DESC_TRANSA/TRANSB), ld the stride between
// columns (rows, for row order), batches of BATCH_COUNT at STRIDED_BATCH_OFFSET elements.
// Types: A, B in bf16 (CUDA_R_16BF) or float; C, D in float or bf16; CUBLAS_COMPUTE_32F: the
// bf16 inputs are widened exactly and every product is summed in float (the tensor cores'
// accumulation, in another order: here OpenBLAS's sgemm on the exactly widened operands, so
// that whole models run in CI time), alpha and beta are float host scalars. The matmul is
// queued on its stream like a kernel. Anything else (epilogues, other types or compute
// modes) is refused with CUBLAS_STATUS_NOT_SUPPORTED rather than computed wrong.
#include <cblas.h>
#include <cublasLt.h>

#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "runtime_sim/sim_device.hpp"

namespace {

struct Layout {
  cudaDataType type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t order = CUBLASLT_ORDER_COL;
  int32_t batch_count = 1;
  int64_t batch_stride = 0;
};

struct Desc {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  bool supported = true;  // false once an attribute this simulator does not compute is set
};

struct Preference {
  uint64_t workspace = 0;
};

float bf16_to_float(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof value);
  return value;
}

uint16_t float_to_bf16(float value) {  // round to nearest even, as the hardware converts
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN stays NaN
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

bool known_type(cudaDataType type) {
  return type == CUDA_R_32F || type == CUDA_R_16BF;
}

// Element (r, c) of the stored matrix of `layout` at `base` (batch offset applied).
float load(const void* base, const Layout& layout, uint64_t r, uint64_t c) {
  const int64_t at = layout.order == CUBLASLT_ORDER_COL ? static_cast<int64_t>(c) * layout.ld + static_cast<int64_t>(r)
                                                        : static_cast<int64_t>(r) * layout.ld + static_cast<int64_t>(c);
  return layout.type == CUDA_R_16BF ? bf16_to_float(static_cast<const uint16_t*>(base)[at])
                                    : static_cast<const float*>(base)[at];
}

void store(void* base, const Layout& layout, uint64_t r, uint64_t c, float value) {
  const int64_t at = layout.order == CUBLASLT_ORDER_COL ? static_cast<int64_t>(c) * layout.ld + static_cast<int64_t>(r)
                                                        : static_cast<int64_t>(r) * layout.ld + static_cast<int64_t>(c);
  if (layout.type == CUDA_R_16BF)
    static_cast<uint16_t*>(base)[at] = float_to_bf16(value);
  else
    static_cast<float*>(base)[at] = value;
}

const void* batch(const void* base, const Layout& layout, int32_t index) {
  const int64_t element = layout.type == CUDA_R_16BF ? 2 : 4;
  return static_cast<const char*>(base) + index * layout.batch_stride * element;
}

template <typename T>
cublasStatus_t copy_attribute(T& field, const void* buffer, size_t bytes) {
  if (bytes != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&field, buffer, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

Layout& layout_of(cublasLtMatrixLayout_t handle) {
  return *reinterpret_cast<Layout*>(handle);
}
Desc& desc_of(cublasLtMatmulDesc_t handle) {
  return *reinterpret_cast<Desc*>(handle);
}

// The shapes agree: op(A) m x k, op(B) k x n, C and D m x n, one batch count (or 1, broadcast).
bool shapes_agree(const Desc& d, const Layout& a, const Layout& b, const Layout& c, const Layout& out) {
  const uint64_t m = d.trans_a == CUBLAS_OP_N ? a.rows : a.cols, k = d.trans_a == CUBLAS_OP_N ? a.cols : a.rows;
  const uint64_t kb = d.trans_b == CUBLAS_OP_N ? b.rows : b.cols, n = d.trans_b == CUBLAS_OP_N ? b.cols : b.rows;
  const int32_t count = out.batch_count;
  for (const Layout* l : {&a, &b, &c})
    if (l->batch_count != count && l->batch_count != 1) return false;
  return k == kb && c.rows == m && c.cols == n && out.rows == m && out.cols == n;
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = reinterpret_cast<cublasLtHandle_t>(new int(0));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete reinterpret_cast<int*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED (by the host simulator)";
    default:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
  }
}

const char* cublasLtGetStatusName(cublasStatus_t status) {
  return cublasLtGetStatusString(status);
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* handle, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (!known_type(type)) return CUBLAS_STATUS_NOT_SUPPORTED;
  auto* layout = new Layout;
  layout->type = type;
  layout->rows = rows;
  layout->cols = cols;
  layout->ld = ld;
  *handle = reinterpret_cast<cublasLtMatrixLayout_t>(layout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t handle) {
  delete &layout_of(handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t handle, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buffer, size_t bytes) {
  Layout& layout = layout_of(handle);
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_ORDER: {
      const cublasStatus_t status = copy_attribute(layout.order, buffer, bytes);
      if (layout.order != CUBLASLT_ORDER_COL && layout.order != CUBLASLT_ORDER_ROW) return CUBLAS_STATUS_NOT_SUPPORTED;
      return status;
    }
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
      return copy_attribute(layout.rows, buffer, bytes);
    case CUBLASLT_MATRIX_LAYOUT_COLS:
      return copy_attribute(layout.cols, buffer, bytes);
    case CUBLASLT_MATRIX_LAYOUT_LD:
      return copy_attribute(layout.ld, buffer, bytes);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return copy_attribute(layout.batch_count, buffer, bytes);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return copy_attribute(layout.batch_stride, buffer, bytes);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* handle, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  auto* desc = new Desc;
  desc->compute = compute;
  desc->scale = scale;
  *handle = reinterpret_cast<cublasLtMatmulDesc_t>(desc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t handle) {
  delete &desc_of(handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t handle, cublasLtMatmulDescAttributes_t attr,
                                              const void* buffer, size_t bytes) {
  Desc& desc = desc_of(handle);
  cublasStatus_t status = CUBLAS_STATUS_NOT_SUPPORTED;
  if (attr == CUBLASLT_MATMUL_DESC_TRANSA) status = copy_attribute(desc.trans_a, buffer, bytes);
  if (attr == CUBLASLT_MATMUL_DESC_TRANSB) status = copy_attribute(desc.trans_b, buffer, bytes);
  for (const cublasOperation_t op : {desc.trans_a, desc.trans_b})
    if (op != CUBLAS_OP_N && op != CUBLAS_OP_T) status = CUBLAS_STATUS_NOT_SUPPORTED;
  return status;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* handle) {
  *handle = reinterpret_cast<cublasLtMatmulPreference_t>(new Preference);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t handle) {
  delete reinterpret_cast<Preference*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t handle,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buffer,
                                                    size_t bytes) {
  auto& preference = *reinterpret_cast<Preference*>(handle);
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return copy_attribute(preference.workspace, buffer, bytes);
  // Alignment promises: the simulator reads any alignment, so it only checks their form.
  if (attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES || attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES ||
      attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES || attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES)
    return bytes == sizeof(uint32_t) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

// One "algorithm" for every problem whose shapes agree (none when they do not, as cuBLASLt
// returns no result for an impossible problem).
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  *returned = 0;
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  if (!shapes_agree(desc_of(desc), layout_of(a), layout_of(b), layout_of(c), layout_of(d)))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  std::memset(&results[0], 0, sizeof(results[0]));
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc_handle, const void* alpha_ptr,
                              const void* a_ptr, cublasLtMatrixLayout_t a_handle, const void* b_ptr,
                              cublasLtMatrixLayout_t b_handle, const void* beta_ptr, const void* c_ptr,
                              cublasLtMatrixLayout_t c_handle, void* d_ptr, cublasLtMatrixLayout_t d_handle,
                              const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t stream) {
  const Desc desc = desc_of(desc_handle);
  const Layout a = layout_of(a_handle), b = layout_of(b_handle), c = layout_of(c_handle), d = layout_of(d_handle);
  if (!shapes_agree(desc, a, b, c, d)) return CUBLAS_STATUS_INVALID_VALUE;
  const float alpha = *static_cast<const float*>(alpha_ptr), beta = *static_cast<const float*>(beta_ptr);
  pf::sim::SimDevice& device = pf::sim::SimDevice::get();
  std::lock_guard<std::recursive_mutex> hold(device.lock());
  // The layouts and scalars are read now (cuBLASLt reads host scalars at the call), the
  // matrices when the stream runs.
  device.enqueue(device.stream(stream), [=] {
    const bool ta = desc.trans_a == CUBLAS_OP_T, tb = desc.trans_b == CUBLAS_OP_T;
    const uint64_t m = d.rows, n = d.cols, k = ta ? a.rows : a.cols;
    for (int32_t batch_index = 0; batch_index < d.batch_count; ++batch_index) {
      const void* ab = batch(a_ptr, a, a.batch_count == 1 ? 0 : batch_index);
      const void* bb = batch(b_ptr, b, b.batch_count == 1 ? 0 : batch_index);
      const void* cb = batch(c_ptr, c, c.batch_count == 1 ? 0 : batch_index);
      void* db = const_cast<void*>(batch(d_ptr, d, batch_index));
      // op(A) [m, k] and op(B) [k, n] widened into dense column-major floats, then summed in float.
      std::vector<float> wide_a(m * k), wide_b(k * n), sum(m * n);
      for (uint64_t p = 0; p < k; ++p)
        for (uint64_t i = 0; i < m; ++i) wide_a[p * m + i] = ta ? load(ab, a, p, i) : load(ab, a, i, p);
      for (uint64_t j = 0; j < n; ++j)
        for (uint64_t p = 0; p < k; ++p) wide_b[j * k + p] = tb ? load(bb, b, j, p) : load(bb, b, p, j);
      if (m > 0 && n > 0 && k > 0)
        cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                    static_cast<int>(k), 1.0f, wide_a.data(), static_cast<int>(m), wide_b.data(), static_cast<int>(k),
                    0.0f, sum.data(), static_cast<int>(m));
      for (uint64_t j = 0; j < n; ++j)
        for (uint64_t i = 0; i < m; ++i) {
          const float s = sum[j * m + i];
          // beta == 0: C is not read (it may hold NaN), as cuBLASLt documents.
          store(db, d, i, j, beta == 0.0f ? alpha * s : alpha * s + beta * load(cb, c, i, j));
        }
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
