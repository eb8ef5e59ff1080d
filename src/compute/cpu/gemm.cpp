// Projections through OpenBLAS sgemm; the [out, in] weight is used transposed in place.
#include "compute/cpu/gemm.hpp"

#include <cblas.h>

#include <algorithm>

#include "compute/cpu/thread_pool.hpp"

namespace pf::cpu {
namespace {

thread_local double gemm_flops = 0;

}  // namespace

void linear(const float* x, int rows, int in, const float* weight, int out, float* y) {
  // One slice of the weight's rows (the output's columns) per thread of the rank's pool.
  ThreadPool& pool = ThreadPool::instance();
  constexpr int kMinColumns = 64;
  const int parts = std::max(1, std::min(pool.threads(), out / kMinColumns));
  pool.run(parts, [&](int part, int) {
    const int begin = static_cast<int>(int64_t(out) * part / parts / 16 * 16);
    const int end = part + 1 == parts ? out : static_cast<int>(int64_t(out) * (part + 1) / parts / 16 * 16);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, end - begin, in, 1.0f, x, in,
                weight + int64_t(begin) * in, in, 0.0f, y + begin, out);
  });
  count_gemm_flops(2.0 * rows * in * out);
}

void single_threaded_gemm() {
  // OpenBLAS' own threads busy-wait with sched_yield between calls, taking cores from the
  // attention threads. (An OpenMP build of OpenBLAS reads this per calling thread: there,
  // OMP_NUM_THREADS=1 does it; Debian's default is the pthreads build.)
  openblas_set_num_threads(1);
}

void count_gemm_flops(double flops) {
  gemm_flops += flops;
}
double counted_gemm_flops() {
  return gemm_flops;
}

}  // namespace pf::cpu
