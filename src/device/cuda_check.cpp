// Failure report for CUDA calls (see cuda_check.hpp).
#include "device/cuda_check.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace pf::cuda {

void fail(const char* library, const char* statement, const std::string& detail, const char* file, int line) {
  int device = -1;
  cudaGetDevice(&device);
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  std::fprintf(stderr, "fatal: %s call `%s` failed (%s) at %s:%d on device %d of %s (pid %d)\n", library, statement,
               detail.c_str(), file, line, device, host, static_cast<int>(getpid()));
  std::fflush(stderr);
  std::abort();
}

bool event_done(cudaEvent_t event) {
  const cudaError_t status = cudaEventQuery(event);
  if (status == cudaErrorNotReady) return false;
  CUDA_CHECK(status);
  return true;
}

}  // namespace pf::cuda
