// The one place the CPU backend calls BLAS for projections.
#pragma once

namespace pf::cpu {

// y[rows, out] = x[rows, in] . W^T, W stored [out, in] as Hugging Face does.
void linear(const float* x, int rows, int in, const float* weight, int out, float* y);

}  // namespace pf::cpu
