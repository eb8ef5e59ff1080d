// Exit 0 and name the device when a CUDA device is usable; else say why and exit 77, the
// code ctest reads as "skipped" (SKIP_RETURN_CODE) for the GPU end-to-end scripts.
#include <cstdio>

#include "device_memory.hpp"

int main() {
  const std::string reason = pf::test::no_device_reason();
  if (!reason.empty()) {
    std::printf("skipped: %s\n", reason.c_str());
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("%s, %d SMs, %.1f GiB\n", prop.name, prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0);
  return 0;
}
