// Exit 0 and name the device when at least N CUDA devices are usable (usage: cuda_probe
// [N], default 1); else say why and exit 77, the code ctest reads as "skipped"
// (SKIP_RETURN_CODE) for the GPU end-to-end scripts.
#include <cstdio>
#include <cstdlib>

#include "device_memory.hpp"

int main(int argc, char** argv) {
  const int wanted = argc > 1 ? std::atoi(argv[1]) : 1;
  const std::string reason = pf::test::no_device_reason();
  if (!reason.empty()) {
    std::printf("skipped: %s\n", reason.c_str());
    return 77;
  }
  int count = 0;
  cudaGetDeviceCount(&count);
  if (count < wanted) {
    std::printf("skipped: needs %d GPUs, %d visible\n", wanted, count);
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("%s, %d SMs, %.1f GiB\n", prop.name, prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0);
  return 0;
}
