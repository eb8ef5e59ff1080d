// Projections through OpenBLAS sgemm; the [out, in] weight is used transposed in place.
#include "compute/cpu/gemm.hpp"

#include <cblas.h>

namespace pf::cpu {
namespace {

thread_local double gemm_flops = 0;

}  // namespace

void linear(const float* x, int rows, int in, const float* weight, int out, float* y) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out, in, 1.0f, x, in, weight, in, 0.0f, y, out);
  count_gemm_flops(2.0 * rows * in * out);
}

void set_gemm_threads(int threads) {
  openblas_set_num_threads(threads);
}

const char* gemm_kernels() {
  return openblas_get_corename();
}

void count_gemm_flops(double flops) {
  gemm_flops += flops;
}
double counted_gemm_flops() {
  return gemm_flops;
}

}  // namespace pf::cpu
