// Which compute backend a run uses. Parsed from --backend once, in src/cli; everything
// else switches on the enum, never on the flag's text.
#pragma once

namespace pf::compute {

enum class BackendKind {
  kCpu,      // float32, OpenBLAS: tests, CI, CPU clusters
  kCuda,     // one GPU per rank, bf16 storage, float32 accumulation
  kEmulate,  // real MPI and schedule, compute replaced by sleeps of a cost model
};

// The --backend spelling (echoed configuration, output attributes, identities).
inline const char* backend_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::kCpu: return "cpu";
    case BackendKind::kCuda: return "cuda";
    case BackendKind::kEmulate: return "emulate";
  }
  return "?";
}

}  // namespace pf::compute
