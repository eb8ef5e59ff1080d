// Checks for CUDA runtime and cuBLASLt calls. This library runs without MPI (kernel tests
// and benchmarks on a bare GPU machine), so a failure prints statement, error, file:line
// and device, then aborts the process; under mpirun/srun that ends the whole job.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

namespace pf::cuda {

[[noreturn]] void fail(const char* library, const char* statement, const std::string& detail, const char* file,
                       int line);

}  // namespace pf::cuda

#define CUDA_CHECK(stmt)                                                                           \
  do {                                                                                             \
    const cudaError_t pf_cuda_status_ = (stmt);                                                    \
    if (pf_cuda_status_ != cudaSuccess)                                                            \
      ::pf::cuda::fail("CUDA", #stmt, cudaGetErrorString(pf_cuda_status_), __FILE__, __LINE__);    \
  } while (0)

// After a kernel launcher: launch-configuration errors surface here, not at the next sync.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#define CUBLAS_CHECK(stmt)                                                                           \
  do {                                                                                               \
    const cublasStatus_t pf_cublas_status_ = (stmt);                                                 \
    if (pf_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                                  \
      ::pf::cuda::fail("cuBLASLt", #stmt, cublasLtGetStatusString(pf_cublas_status_), __FILE__, __LINE__); \
  } while (0)
