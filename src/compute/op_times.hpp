// What a backend measured of its own forwards (StageCompute::op_times; trace/op_times.hpp
// gathers and prints them).
#pragma once

namespace pf::compute {

// Seconds and counted FLOPs of a backend's forwards, by kind of op (StageCompute::op_times).
struct OpTimes {
  double forward_s = 0;                         // all of forward()
  double attention_s = 0, attention_flops = 0;  // the attention kernels
  double gemm_s = 0, gemm_flops = 0;            // projections and experts (their GEMMs and glue)
  double lent_s = 0;                            // kernels on CPUs lent by waiting ranks (rank_threads.hpp)
};

}  // namespace pf::compute
