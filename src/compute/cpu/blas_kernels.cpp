// OpenBLAS's kernels chosen by the CPU's features (see blas_kernels.hpp).
#include "compute/cpu/blas_kernels.hpp"

#include <cblas.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>

namespace pf::cpu {
namespace {

// The vector ISA a kernel set (or a CPU) uses, narrowest first.
enum class Level { kSse, kAvx, kAvx2, kAvx512 };

// OpenBLAS's x86-64 core names (driver/others/dynamic.c) by the ISA their sgemm kernels use;
// a name it adds later counts as generic until listed here (the warning would say so).
Level level_of_core(const std::string& core) {
  for (const char* name : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    if (core == name) return Level::kAvx512;
  for (const char* name : {"Haswell", "Zen", "Excavator"})
    if (core == name) return Level::kAvx2;
  for (const char* name : {"Sandybridge", "Bulldozer", "Piledriver", "Steamroller"})
    if (core == name) return Level::kAvx;
  return Level::kSse;
}

// What this CPU runs (the kernels' own requirements: SkylakeX's need F, BW, DQ and VL).
Level level_of_cpu() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    return Level::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Level::kAvx2;
  if (__builtin_cpu_supports("avx")) return Level::kAvx;
  return Level::kSse;
}

const char* core_for(Level level) {
  return level == Level::kAvx512 ? "SkylakeX" : level == Level::kAvx2 ? "Haswell" : nullptr;
}

const char* level_name(Level level) {
  return level == Level::kAvx512 ? "AVX-512" : level == Level::kAvx2 ? "AVX2" : level == Level::kAvx ? "AVX" : "SSE";
}

// Set in the re-executed process: "CHOSEN:ORIGINAL" (what pipefill asked for, what OpenBLAS
// had picked by itself). Also stops a second re-execution.
constexpr const char* kChoiceVariable = "PIPEFILL_BLAS_CHOICE";

// The signals that stop a run: a stop arriving while the program is replaced would find the
// signal's default action (death) there, so they are held back across the execv.
sigset_t stop_signals() {
  sigset_t stops;
  sigemptyset(&stops);
  sigaddset(&stops, SIGTERM);
  sigaddset(&stops, SIGUSR1);
  return stops;
}

}  // namespace

void choose_blas_kernels(char** argv) {
  const sigset_t stops = stop_signals();
  sigprocmask(SIG_UNBLOCK, &stops, nullptr);  // held back by the process this one replaced
  if (std::getenv("OPENBLAS_CORETYPE") || std::getenv(kChoiceVariable)) return;  // the user's, or done
  const std::string original = openblas_get_corename();
  const Level cpu = level_of_cpu();
  const char* wanted = core_for(cpu);
  if (!wanted || level_of_core(original) >= cpu) return;
  const std::string choice = std::string(wanted) + ":" + original;
  if (::setenv("OPENBLAS_CORETYPE", wanted, 1) != 0 || ::setenv(kChoiceVariable, choice.c_str(), 1) != 0) return;
  sigprocmask(SIG_BLOCK, &stops, nullptr);  // pending across execv until the new process unblocks it
  ::execv("/proc/self/exe", argv);          // returns only on failure: go on with OpenBLAS's choice
  sigprocmask(SIG_UNBLOCK, &stops, nullptr);
  ::unsetenv("OPENBLAS_CORETYPE");
}

std::string blas_kernels_description() {
  const std::string core = openblas_get_corename();
  std::string text = "OpenBLAS " + core + " GEMMs";
  const char* choice = std::getenv(kChoiceVariable);
  if (!choice) return text;
  const char* colon = std::strchr(choice, ':');
  if (colon && core == std::string(choice, colon))
    text += std::string(" (chosen from the CPU's features; OpenBLAS took this CPU for ") + (colon + 1) + ")";
  return text;
}

std::string blas_kernels_warning() {
  const std::string core = openblas_get_corename();
  const Level cpu = level_of_cpu();
  const char* wanted = core_for(cpu);
  if (!wanted || level_of_core(core) >= cpu) return "";
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  const bool by_user = forced && !std::getenv(kChoiceVariable);
  return std::string("OpenBLAS runs its ") + core + " GEMM kernels (" + level_name(level_of_core(core)) +
         ") on this CPU, which has " + level_name(cpu) +
         ": the projections run several times slower (17 against 85 GFLOP/s a core measured on an AVX-512 Xeon). " +
         (by_user ? std::string("OPENBLAS_CORETYPE=") + forced + " asks for them: unset it, or set it to " + wanted
                  : std::string("pipefill could not make OpenBLAS use its ") + wanted +
                        " kernels (is it a DYNAMIC_ARCH build?): install one that knows this CPU");
}

}  // namespace pf::cpu
