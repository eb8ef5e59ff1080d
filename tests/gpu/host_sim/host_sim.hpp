// A host simulator of the CUDA execution model, just enough for pipefill's kernels: a
// launch runs each block's threads as fibers on the calling host thread (one block after
// another), with real barriers for __syncthreads (a fiber waits by yielding to the next),
// lock-step warp exchanges for __shfl_xor_sync, and the PTX
// ISA's definitions of mma.sync.m16n8k16 (bf16, f32 accumulate) and cp.async (completing
// at once). Device memory is host memory. Used with kernels compiled with PF_HOST_SIM
// (kernels/device_compat.cuh) so CI, which has no GPU, runs the kernels' own code.
#pragma once

#include <vector_types.h>

#include <cstddef>
#include <cstdint>
#include <functional>

namespace pf::sim {

const dim3& thread_index();
const dim3& block_index();
const dim3& block_dim();
const dim3& grid_dim();
void sync_threads();
float shfl_xor(float value, int lane_mask);
void* dynamic_shared();

// Runs body() on every thread of every block of the grid; returns when all are done.
void launch(dim3 grid, dim3 block, size_t dynamic_shared_bytes, const std::function<void()>& body);

// Where a kernel launch goes (PF_LAUNCH): by default it runs at once, whatever its stream
// (the kernel checks, which have no runtime); the simulated runtime (tests/gpu/runtime_sim)
// installs an executor that queues it on its stream.
using StreamExecutor = void (*)(void* stream, std::function<void()> work);
void set_stream_executor(StreamExecutor executor);
void launch_on_stream(void* stream, std::function<void()> work);

// d += a * b for the warp: each lane passes its own fragments (PTX ISA layouts).
void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: `row` is this lane's row address.
void ldmatrix_x4(uint32_t (&r)[4], const void* row, bool transpose);
// cp.async of 16 bytes (src-size 16, or 0: zero-fill).
void copy_16(void* dst, const void* src, bool valid);

}  // namespace pf::sim
