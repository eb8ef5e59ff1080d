// The simulated runtime (runtime_sim/) against what NVIDIA documents, on hand-worked cases:
// cuBLASLt's column-major D = alpha op(A) op(B) + beta C with transposes, row order, leading
// dimensions, strided batches and bf16 rounding; streams that run only when forced, events
// that order them, and a missing wait that shows as a wrong result.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "runtime_sim/sim_device.hpp"

namespace {

uint16_t bf16(float value) {  // exact for the small integers and halves used below
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return static_cast<uint16_t>(bits >> 16);
}

template <typename T>
T* device_copy(const std::vector<T>& host) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return static_cast<T*>(p);
}

template <typename T>
std::vector<T> host_copy(const T* device, size_t n) {
  std::vector<T> host(n);
  EXPECT_EQ(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

struct Gemm {
  cublasLtHandle_t handle{};
  cublasLtMatmulDesc_t desc{};
  cublasLtMatrixLayout_t a{}, b{}, c{};
  Gemm(cublasOperation_t ta, cublasOperation_t tb) {
    EXPECT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), CUBLAS_STATUS_SUCCESS);
  }
  ~Gemm() {
    for (auto l : {a, b, c})
      if (l) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(handle);
  }
  cublasStatus_t run(const void* x, const void* y, float beta, void* out, cudaStream_t stream = nullptr) {
    const float alpha = 1.0f;
    return cublasLtMatmul(handle, desc, &alpha, x, a, y, b, &beta, out, c, out, c, nullptr, nullptr, 0, stream);
  }
};

}  // namespace

// A = [1 2 3; 4 5 6] (2x3), B = [1 0; 0 1; 1 1] (3x2): A B = [4 5; 10 11], stored by columns.
TEST(SimCublasLt, ColumnMajorProduct) {
  const std::vector<uint16_t> a = {bf16(1), bf16(4), bf16(2), bf16(5), bf16(3), bf16(6)};  // ld 2
  const std::vector<uint16_t> b = {bf16(1), bf16(0), bf16(1), bf16(0), bf16(1), bf16(1)};  // ld 3
  Gemm g(CUBLAS_OP_N, CUBLAS_OP_N);
  cublasLtMatrixLayoutCreate(&g.a, CUDA_R_16BF, 2, 3, 2);
  cublasLtMatrixLayoutCreate(&g.b, CUDA_R_16BF, 3, 2, 3);
  cublasLtMatrixLayoutCreate(&g.c, CUDA_R_32F, 2, 2, 2);
  auto *da = device_copy(a), *db = device_copy(b);
  float* dc = device_copy(std::vector<float>{100, 200, 300, 400});
  ASSERT_EQ(g.run(da, db, 0.0f, dc), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(host_copy(dc, 4), (std::vector<float>{4, 10, 5, 11}));
  ASSERT_EQ(g.run(da, db, 1.0f, dc), CUBLAS_STATUS_SUCCESS);  // beta 1: C += A B
  EXPECT_EQ(host_copy(dc, 4), (std::vector<float>{8, 20, 10, 22}));
  for (void* p : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dc)}) cudaFree(p);
}

// op(A) = A^T with A stored 3x2 (ld 4: a padding row), B^T with B stored 2x3; row order for C.
TEST(SimCublasLt, TransposesLeadingDimensionsAndRowOrder) {
  // A (3x2, ld 4) = [1 4; 2 5; 3 6] so A^T = [1 2 3; 4 5 6]; B (2x3) = [1 0 1; 0 1 1] so B^T = [1 0; 0 1; 1 1].
  const std::vector<uint16_t> a = {bf16(1), bf16(2), bf16(3), bf16(-9), bf16(4), bf16(5), bf16(6), bf16(-9)};
  const std::vector<uint16_t> b = {bf16(1), bf16(0), bf16(0), bf16(1), bf16(1), bf16(1)};
  Gemm g(CUBLAS_OP_T, CUBLAS_OP_T);
  cublasLtMatrixLayoutCreate(&g.a, CUDA_R_16BF, 3, 2, 4);
  cublasLtMatrixLayoutCreate(&g.b, CUDA_R_16BF, 2, 3, 2);
  cublasLtMatrixLayoutCreate(&g.c, CUDA_R_32F, 2, 2, 2);
  const int32_t row = CUBLASLT_ORDER_ROW;
  ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(g.c, CUBLASLT_MATRIX_LAYOUT_ORDER, &row, sizeof row),
            CUBLAS_STATUS_SUCCESS);
  auto *da = device_copy(a), *db = device_copy(b);
  float* dc = device_copy(std::vector<float>(4, 0));
  ASSERT_EQ(g.run(da, db, 0.0f, dc), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(host_copy(dc, 4), (std::vector<float>{4, 5, 10, 11}));  // [4 5; 10 11] by rows
  for (void* p : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dc)}) cudaFree(p);
}

// Two batches 6 elements apart in A, 2 apart in B (a 2x1 vector), 2 apart in C.
TEST(SimCublasLt, StridedBatchesAndBf16Output) {
  const std::vector<uint16_t> a = {bf16(1), bf16(0), bf16(0), bf16(1),   bf16(0), bf16(0),   // batch 0: I
                                   bf16(2), bf16(0), bf16(0), bf16(0.5), bf16(0), bf16(0)};  // batch 1: diag(2, .5)
  const std::vector<uint16_t> b = {bf16(3), bf16(5), bf16(3), bf16(5)};
  Gemm g(CUBLAS_OP_N, CUBLAS_OP_N);
  cublasLtMatrixLayoutCreate(&g.a, CUDA_R_16BF, 2, 2, 2);
  cublasLtMatrixLayoutCreate(&g.b, CUDA_R_16BF, 2, 1, 2);
  cublasLtMatrixLayoutCreate(&g.c, CUDA_R_16BF, 2, 1, 2);
  const int32_t count = 2;
  const int64_t strides[] = {6, 2, 2};
  cublasLtMatrixLayout_t layouts[] = {g.a, g.b, g.c};
  for (int i = 0; i < 3; ++i) {
    cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count);
    cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
                                     sizeof strides[i]);
  }
  auto *da = device_copy(a), *db = device_copy(b);
  uint16_t* dc = device_copy(std::vector<uint16_t>(4, 0));
  ASSERT_EQ(g.run(da, db, 0.0f, dc), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(host_copy(dc, 4), (std::vector<uint16_t>{bf16(3), bf16(5), bf16(6), bf16(2.5)}));
  // 1 + 2^-8 is halfway between two bf16 values (1 and 1 + 2^-7): rounded to even, 1.
  const std::vector<uint16_t> half_way_a = {bf16(1)}, half_way_b = {bf16(1)};
  Gemm h(CUBLAS_OP_N, CUBLAS_OP_N);
  cublasLtMatrixLayoutCreate(&h.a, CUDA_R_16BF, 1, 1, 1);
  cublasLtMatrixLayoutCreate(&h.b, CUDA_R_16BF, 1, 1, 1);
  cublasLtMatrixLayoutCreate(&h.c, CUDA_R_16BF, 1, 1, 1);
  auto *ha = device_copy(half_way_a), *hb = device_copy(half_way_b);
  uint16_t* hc = device_copy(std::vector<uint16_t>{bf16(1.0f / 256)});
  ASSERT_EQ(h.run(ha, hb, 1.0f, hc), CUBLAS_STATUS_SUCCESS);  // 1 + 2^-8
  EXPECT_EQ(host_copy(hc, 1)[0], bf16(1));
  for (void* p : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dc), static_cast<void*>(ha),
                  static_cast<void*>(hb), static_cast<void*>(hc)})
    cudaFree(p);
}

TEST(SimCublasLt, ImpossibleShapesHaveNoAlgorithm) {
  Gemm g(CUBLAS_OP_N, CUBLAS_OP_N);
  cublasLtMatrixLayoutCreate(&g.a, CUDA_R_16BF, 2, 3, 2);
  cublasLtMatrixLayoutCreate(&g.b, CUDA_R_16BF, 4, 2, 4);  // k 3 against 4
  cublasLtMatrixLayoutCreate(&g.c, CUDA_R_32F, 2, 2, 2);
  cublasLtMatmulPreference_t preference;
  cublasLtMatmulPreferenceCreate(&preference);
  cublasLtMatmulHeuristicResult_t result;
  int found = -1;
  cublasLtMatmulAlgoGetHeuristic(g.handle, g.desc, g.a, g.b, g.c, g.c, preference, 1, &result, &found);
  EXPECT_EQ(found, 0);
  cublasLtMatmulPreferenceDestroy(preference);
}

// Work on a stream runs when the host forces it, not when it is enqueued.
TEST(SimStreams, RunOnlyWhenForced) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  std::vector<float> host = {1, 2, 3}, back(3, 0);
  float* d = device_copy(std::vector<float>(3, 0));
  cudaMemcpyAsync(d, host.data(), 12, cudaMemcpyHostToDevice, s);
  cudaMemcpyAsync(back.data(), d, 12, cudaMemcpyDeviceToHost, s);
  EXPECT_EQ(back, std::vector<float>(3, 0)) << "ran before it was forced";
  cudaStreamSynchronize(s);
  EXPECT_EQ(back, host);
  cudaFree(d);
  cudaStreamDestroy(s);
}

// A producer stream writes, a consumer stream copies out. Without the event the consumer runs
// first (late-first: the newer stream) and copies what was there; with it, the value written.
TEST(SimStreams, AMissingWaitReadsStaleDataAndAnEventOrdersThem) {
  cudaStream_t producer, consumer;
  cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking);
  cudaEvent_t written;
  cudaEventCreateWithFlags(&written, cudaEventDisableTiming);
  const std::vector<float> fresh = {7, 8};
  for (const bool wait : {false, true}) {
    float* d = device_copy(std::vector<float>{-1, -1});
    std::vector<float> out(2, 0);
    cudaMemcpyAsync(d, fresh.data(), 8, cudaMemcpyHostToDevice, producer);
    cudaEventRecord(written, producer);
    if (wait) cudaStreamWaitEvent(consumer, written, 0);
    cudaMemcpyAsync(out.data(), d, 8, cudaMemcpyDeviceToHost, consumer);
    cudaDeviceSynchronize();
    EXPECT_EQ(out, wait ? fresh : std::vector<float>({-1, -1})) << (wait ? "with" : "without") << " the wait";
    cudaFree(d);
  }
  cudaEventDestroy(written);
  cudaStreamDestroy(producer);
  cudaStreamDestroy(consumer);
}

// An event query is the host waiting: it runs what the event covers, and only that.
TEST(SimStreams, EventQueryRunsWhatItCovers) {
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEvent_t half, start;
  cudaEventCreate(&half);
  cudaEventCreate(&start);
  std::vector<float> a = {1}, b = {2}, out_a(1, 0), out_b(1, 0);
  cudaEventRecord(start, s);
  cudaMemcpyAsync(out_a.data(), a.data(), 4, cudaMemcpyHostToHost, s);
  cudaEventRecord(half, s);
  cudaMemcpyAsync(out_b.data(), b.data(), 4, cudaMemcpyHostToHost, s);
  EXPECT_EQ(cudaEventQuery(half), cudaSuccess);
  EXPECT_EQ(out_a[0], 1);
  EXPECT_EQ(out_b[0], 0) << "ran past the event";
  float ms = -1;
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, half), cudaSuccess);
  EXPECT_GE(ms, 0);
  cudaStreamSynchronize(s);
  EXPECT_EQ(out_b[0], 2);
  cudaEventDestroy(half);
  cudaEventDestroy(start);
  cudaStreamDestroy(s);
}

TEST(SimMemory, AllocationIsCountedAndFreshMemoryIsNotZero) {
  size_t free_before = 0, total = 0, free_after = 0;
  cudaMemGetInfo(&free_before, &total);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  cudaMemGetInfo(&free_after, &total);
  EXPECT_EQ(free_before - free_after, 1024u);  // 256-byte granules
  EXPECT_EQ(static_cast<unsigned char*>(p)[0], 0xff);
  void* too_big = nullptr;
  EXPECT_EQ(cudaMalloc(&too_big, total), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cudaFree(p);
}
