// Projections through OpenBLAS sgemm; the [out, in] weight is used transposed in place.
#include "compute/cpu/gemm.hpp"

#include <cblas.h>

namespace pf::cpu {

void linear(const float* x, int rows, int in, const float* weight, int out, float* y) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out, in, 1.0f, x, in, weight, in, 0.0f, y, out);
}

}  // namespace pf::cpu
