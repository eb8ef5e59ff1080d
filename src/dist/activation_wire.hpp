// What pipefill puts on the wire for activations, decided once: float32. Every backend that
// computes keeps its residual stream in float32 (cuda too: bf16 weights and GEMM inputs,
// float32 outputs), sends it between stages as float32 (host and device transports) and
// all-reduces the row-parallel partial sums as float32 (MPI_FLOAT, ncclFloat). The models
// of a run charge the same bytes, so that they model the program that runs: the emulator's
// messages, and the simulator's transfers and all-reduce times (docs/choices.md).
#pragma once

namespace pf::dist {

inline constexpr int kActivationWireBytes = 4;  // float32

}  // namespace pf::dist
