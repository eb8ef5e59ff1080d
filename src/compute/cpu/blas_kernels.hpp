// Which GEMM kernels OpenBLAS runs, chosen from the CPU's feature bits rather than its model.
//
// OpenBLAS (a DYNAMIC_ARCH build, as distributions ship it) picks its kernels when it loads,
// by the CPU's family and model number; a CPU newer than the library gets its generic
// "Prescott" SSE3 kernels, silently: Debian 12's 0.3.21 on an Emerald Rapids Xeon (family 6
// model 207, AVX-512) ran SmolLM2's projections at 17 GFLOP/s a core instead of 85. OpenBLAS
// reads OPENBLAS_CORETYPE only while it loads, before main, so pipefill re-executes itself
// once with it set when the library's choice uses a narrower ISA than the CPU has: AVX-512
// (F, BW, DQ, VL) gets SkylakeX, AVX2 with FMA gets Haswell. A user's own OPENBLAS_CORETYPE
// is kept; generic kernels that remain on an AVX2-or-better CPU are a `warning:`.
#pragma once

#include <string>

namespace pf::cpu {

// First thing in main, before MPI_Init and before any thread of ours: re-executes the program
// (same pid, arguments and environment, plus OPENBLAS_CORETYPE) when OpenBLAS chose kernels
// for an older ISA than this CPU runs and nobody set OPENBLAS_CORETYPE. Returns when no
// re-execution is needed, or when it failed (the warning says so later). The stop signals
// (SIGTERM, SIGUSR1) are blocked across the re-execution and unblocked on entry, in every
// command: install their handlers before calling.
void choose_blas_kernels(char** argv);

// For the run's header: "OpenBLAS SkylakeX GEMMs (chosen from the CPU's features; OpenBLAS took
// this CPU for Prescott)", or "OpenBLAS Zen GEMMs".
std::string blas_kernels_description();

// A `warning:` line's text when OpenBLAS runs kernels for an older ISA than the CPU has (a
// user's OPENBLAS_CORETYPE, or a library that ignored it), with what it costs and the fix;
// empty otherwise.
std::string blas_kernels_warning();

}  // namespace pf::cpu
