// Checks for CUDA runtime and cuBLASLt calls. This library runs without MPI (kernel tests
// and benchmarks on a bare GPU machine), so a failure prints statement, error, file:line
// and device, then aborts the process; under mpirun/srun that ends the whole job.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "errors.hpp"

namespace pf::cuda {

[[noreturn]] void fail(const char* library, const char* statement, const std::string& detail, const char* file,
                       int line);

// True once the work before `event` has run; a failed query is a fatal error.
bool event_done(cudaEvent_t event);

}  // namespace pf::cuda

#define PF_CUDA_OK(r) ((r) == cudaSuccess)
#define PF_CUBLAS_OK(r) ((r) == CUBLAS_STATUS_SUCCESS)
#define CUDA_CHECK(stmt) PF_CHECK_WITH(::pf::cuda::fail, "CUDA", stmt, PF_CUDA_OK, cudaGetErrorString)
#define CUBLAS_CHECK(stmt) PF_CHECK_WITH(::pf::cuda::fail, "cuBLASLt", stmt, PF_CUBLAS_OK, cublasLtGetStatusString)

// After a kernel launcher: launch-configuration errors surface here, not at the next sync.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
