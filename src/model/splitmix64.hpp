// splitmix64 (Steele, Lea and Flood): one step of its sequence, a bijection of 64 bits with full
// avalanche. The synthetic weights draw their values from it, and so does the benchmark's
// checkpoint writer (bench/bench_inputs.cpp), so that both fill tensors the same way.
#pragma once

#include <cstdint>

namespace pf::model {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace pf::model
