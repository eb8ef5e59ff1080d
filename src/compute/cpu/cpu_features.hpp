// Which vector ISA the hand-written CPU kernels use: the widest this CPU runs and this build
// compiled, chosen once at run time (a build with -DPIPEFILL_NATIVE=OFF serves AVX2-only and
// AVX-512 nodes alike; the default -march=native build is for CPUs like the one it was built
// on). PIPEFILL_CPU_ISA=avx512|avx2|portable narrows the choice, for tests and comparisons;
// asking for an ISA the CPU lacks is an error rather than an illegal instruction.
#pragma once

namespace pf::cpu {

enum class Isa { kPortable, kAvx2, kAvx512 };

// The ISA in use (decided on first call; throws std::runtime_error on a bad PIPEFILL_CPU_ISA).
Isa kernel_isa();
const char* isa_name(Isa isa);
// What this CPU runs and this build compiled, whatever PIPEFILL_CPU_ISA says.
bool isa_available(Isa isa);

}  // namespace pf::cpu
