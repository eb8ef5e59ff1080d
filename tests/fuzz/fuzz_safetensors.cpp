// libFuzzer target: any bytes as a safetensors file. Parsing and reading slices of every
// tensor must either work or throw UserError: no crash, no sanitizer report, no other exception.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "errors.hpp"
#include "io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memfd_create("fuzz.safetensors", 0);
  if (fd < 0 || write(fd, data, size) != static_cast<ssize_t>(size)) return 0;
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  try {
    pf::io::SafetensorsFile file(path);
    std::vector<float> out;
    for (const auto& [name, info] : file.tensors()) {
      const int64_t rows = std::min<int64_t>(info.rows(), 4), cols = std::min<int64_t>(info.cols(), 4);
      out.resize(static_cast<size_t>(rows * cols));
      file.read_block(name, 0, rows, 0, cols, out.data());
    }
  } catch (const pf::UserError&) {
  }
  close(fd);
  return 0;
}
