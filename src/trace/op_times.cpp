// See op_times.hpp.
#include "trace/op_times.hpp"

#include <mpi.h>

namespace pf::trace {

compute::OpTimes gather_op_times(const compute::OpTimes& mine) {
  double local[6] = {mine.forward_s, mine.attention_s, mine.attention_flops, mine.gemm_s, mine.gemm_flops, mine.lent_s};
  double sum[6] = {0, 0, 0, 0, 0, 0};
  MPI_Reduce(local, sum, 6, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  compute::OpTimes all;
  all.forward_s = sum[0];
  all.attention_s = sum[1];
  all.attention_flops = sum[2];
  all.gemm_s = sum[3];
  all.gemm_flops = sum[4];
  all.lent_s = sum[5];
  return all;
}

void print_op_times(const compute::OpTimes& t, std::FILE* out) {
  if (t.forward_s <= 0) return;
  const auto share = [&](double s) { return 100.0 * s / t.forward_s; };
  const auto rate = [](double flops, double s) { return s > 0 ? flops / s / 1e9 : 0.0; };
  const double rest = t.forward_s - t.attention_s - t.gemm_s;
  std::fprintf(out,
               "cpu time: attention %.0f %% of the layers' time at %.1f GFLOP/s a rank, projections %.0f %% at %.1f, "
               "the rest %.0f %% (norms, RoPE, SwiGLU, residual adds, KV writes)\n",
               share(t.attention_s), rate(t.attention_flops, t.attention_s), share(t.gemm_s),
               rate(t.gemm_flops, t.gemm_s), share(rest));
  if (t.lent_s > 0)
    std::fprintf(out, "cpu time: %.0f %% of it on CPUs lent by ranks waiting on the same node\n", share(t.lent_s));
}

}  // namespace pf::trace
