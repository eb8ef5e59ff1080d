// The PTX instructions the attention kernel uses, each in one inline function: bf16 tensor
// core MMA (m16n8k16, float accumulators), asynchronous global -> shared copies, and
// shared -> register matrix loads (ldmatrix). Under
// PF_HOST_SIM the same functions follow the PTX ISA's definitions on the host.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>

#include "device_compat.cuh"

namespace pf::kernels::detail {

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (lo) in the low half
  uint32_t bits;
  memcpy(&bits, &v, sizeof(bits));  // compiles to a register move
  return bits;
}

__device__ __forceinline__ uint32_t pack_raw(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

#ifndef PF_HOST_SIM

// d += a * b on one 16x8x16 tile (a: 16x16 row-major fragment, b: 16x8 column fragment).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 16 bytes global -> shared, asynchronously; !valid zero-fills the 16 bytes instead.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Four 8x8 b16 matrices from shared memory: lane l gives the address of row l % 8 of matrix
// l / 8, and receives in r[i] row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 of matrix i
// (.trans: rows 2 (l % 4) and 2 (l % 4) + 1 of column l / 4).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

#else

inline void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  ::pf::sim::mma_m16n8k16_bf16(d, a, b0, b1);
}
inline void cp_async_16(void* smem, const void* gmem, bool valid) { ::pf::sim::copy_16(smem, gmem, valid); }
inline void cp_async_commit() {}
inline void ldmatrix_x4(uint32_t (&r)[4], const void* row) { ::pf::sim::ldmatrix_x4(r, row, false); }
inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) { ::pf::sim::ldmatrix_x4(r, row, true); }
template <int N>
inline void cp_async_wait() {}  // the simulator's copies complete at once

#endif

// Two adjacent 8-column tiles from one ldmatrix.x4: lo += a * {b[0], b[1]}, hi += a * {b[2], b[3]}.
__device__ __forceinline__ void mma_bf16_x2(float (&lo)[4], float (&hi)[4], const uint32_t (&a)[4],
                                            const uint32_t (&b)[4]) {
  mma_bf16(lo, a, b[0], b[1]);
  mma_bf16(hi, a, b[2], b[3]);
}

}  // namespace pf::kernels::detail
