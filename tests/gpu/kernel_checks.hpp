// Shared by the kernel checks against the CPU backend (test_*_vs_cpu.cpp here), each built
// twice, for a GPU and for the host simulator: bf16 conversions, the NaN poison for
// outputs, the bf16 tolerance, and the device checks.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "device_memory.hpp"
#include "io/safetensors.hpp"
#include "kernels/kernels.hpp"
#include "support/test_data.hpp"

namespace pf::test {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// Relative 2-norm error allowed where a kernel rounds its output (or an input it forms) to bf16.
constexpr double kBf16Tolerance = 1e-2;

inline std::vector<kernels::bf16> as_bf16(const std::vector<float>& v) {
  std::vector<kernels::bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    __nv_bfloat16_raw raw;
    raw.x = io::float_to_bf16(v[i]);
    out[i] = raw;
  }
  return out;
}

inline std::vector<float> as_float(const std::vector<kernels::bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<float>(v[i]);
  return out;
}

// A measured error for RecordProperty (the XML report keeps the figures the tests measure).
inline std::string scientific(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3e", value);
  return text;
}

}  // namespace pf::test

#define REQUIRE_DEVICE()                                        \
  do {                                                          \
    const std::string reason = ::pf::test::no_device_reason();  \
    if (!reason.empty()) GTEST_SKIP() << "skipped: " << reason; \
  } while (0)
#define EXPECT_SYNCED() EXPECT_EQ(::pf::test::sync_device(), "")
