// Run-time choice of the CPU kernels' ISA (see cpu_features.hpp).
#include "compute/cpu/cpu_features.hpp"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace pf::cpu {
namespace {

Isa decide() {
  const char* wanted = std::getenv("PIPEFILL_CPU_ISA");
  if (wanted && *wanted) {
    for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512})
      if (std::string(wanted) == isa_name(isa)) {
        if (!isa_available(isa))
          throw std::runtime_error(std::string("PIPEFILL_CPU_ISA=") + wanted +
                                   ": this CPU or this build has no such kernels");
        return isa;
      }
    throw std::runtime_error(std::string("PIPEFILL_CPU_ISA=") + wanted + ": expected avx512, avx2 or portable");
  }
  if (isa_available(Isa::kAvx512)) return Isa::kAvx512;
  if (isa_available(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kPortable;
}

}  // namespace

bool isa_available(Isa isa) {
  switch (isa) {
    case Isa::kPortable:
      return true;
    case Isa::kAvx2:
#if defined(PIPEFILL_X86_KERNELS)
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
      return false;
#endif
    case Isa::kAvx512:
#if defined(PIPEFILL_X86_KERNELS)
      return __builtin_cpu_supports("avx512f");
#else
      return false;
#endif
  }
  return false;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kPortable:
      return "portable";
  }
  return "?";
}

Isa kernel_isa() {
  static const Isa isa = decide();
  return isa;
}

}  // namespace pf::cpu
