// Lets the kernels of this folder also compile as plain C++ for the host simulator
// (tests/gpu/host_sim): with PF_HOST_SIM defined, a launch runs every block's threads as
// host threads with real barriers and warp exchanges, and the few PTX instructions used
// (mma.sync, cp.async) follow their PTX ISA definitions. CI has no GPU: this is how the
// kernels' indexing, masking, tiling and fragment bookkeeping are tested there against the
// CPU backend. Without PF_HOST_SIM this header only defines the launch macro.
#pragma once

#ifdef PF_HOST_SIM
#include <algorithm>
#include <cmath>

#include "host_sim/host_sim.hpp"

#undef __global__
#undef __device__
#undef __forceinline__
#undef __launch_bounds__
#undef __shared__
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static  // one block runs at a time: a static is that block's shared memory
#define threadIdx (::pf::sim::thread_index())
#define blockIdx (::pf::sim::block_index())
#define blockDim (::pf::sim::block_dim())
#define gridDim (::pf::sim::grid_dim())
#define __syncthreads() ::pf::sim::sync_threads()
#define __shfl_xor_sync(mask, value, offset) ::pf::sim::shfl_xor(value, offset)
#define PF_DYNAMIC_SHARED(type, name) type* name = static_cast<type*>(::pf::sim::dynamic_shared())
#define PF_LAUNCH(kernel, grid, block, smem, stream, ...)                                               \
  ::pf::sim::launch_on_stream(static_cast<void*>(stream), [=] {                                      \
    ::pf::sim::launch(dim3(grid), dim3(block), smem, [=] { kernel(__VA_ARGS__); });                  \
  })
#define PF_SET_MAX_DYNAMIC_SHARED(kernel, bytes) ((void)0)
using std::min;
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
// A block's fibers switch only at barriers and warp exchanges: a plain add is atomic here.
inline int atomicAdd(int* address, int value) {
  const int old = *address;
  *address = old + value;
  return old;
}
#else
#define PF_DYNAMIC_SHARED(type, name) extern __shared__ __align__(16) type name[]
#define PF_LAUNCH(kernel, grid, block, smem, stream, ...) kernel<<<grid, block, smem, stream>>>(__VA_ARGS__)
#define PF_SET_MAX_DYNAMIC_SHARED(kernel, bytes) \
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes))
#endif
