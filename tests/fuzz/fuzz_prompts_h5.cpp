// libFuzzer target: any bytes as the input HDF5 file, read as `run` reads it (in a forked
// child, so crashes inside libhdf5 become errors). Validation must accept a well-formed
// input or throw UserError: no crash, no sanitizer report, no other exception.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "errors.hpp"
#include "io/prompts_h5.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The scratch file goes where run_fuzzers.sh says (its temporary folder, removed at exit), so
  // a run leaves nothing in /tmp.
  static const std::string path = [] {
    const char* dir = std::getenv("PIPEFILL_FUZZ_SCRATCH");
    return std::string(dir && *dir ? dir : "/tmp") + "/pipefill_fuzz_" + std::to_string(getpid()) + ".h5";
  }();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    pf::io::read_prompts_isolated(path, 512);
  } catch (const pf::UserError&) {
  }
  return 0;
}
