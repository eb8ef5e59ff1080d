// safetensors: round trips in every dtype, conversions, and every malformed-file case the
// loader must turn into a UserError rather than a crash or a silent misread.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "errors.hpp"
#include "io/safetensors.hpp"

using namespace pf;
using namespace pf::io;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("pf_st_" + std::to_string(::getpid()) + "_" + name)).string();
}

// Writes an 8-byte length, the header text, then `data_bytes` zero bytes.
std::string write_raw(const std::string& name, const std::string& header, size_t data_bytes,
                      uint64_t length_field = 0) {
  const std::string path = temp_path(name);
  std::ofstream out(path, std::ios::binary);
  const uint64_t length = length_field ? length_field : header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((length >> (8 * i)) & 0xFF));
  out << header << std::string(data_bytes, '\0');
  return path;
}

void expect_user_error(const std::string& path, const std::string& fragment) {
  try {
    SafetensorsFile file(path);
    FAIL() << "no error for " << path;
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(Safetensors, RoundTripF32AndSlices) {
  std::vector<float> a(12), b(5);
  for (int i = 0; i < 12; ++i) a[i] = 0.5f * i - 2.0f;
  for (int i = 0; i < 5; ++i) b[i] = 100.0f + i;
  const std::string path = temp_path("roundtrip.safetensors");
  write_safetensors(path, {{"a", {3, 4}, a.data()}, {"b", {5}, b.data()}}, Dtype::kF32);
  SafetensorsFile file(path);
  EXPECT_EQ(file.info("a").shape, (std::vector<int64_t>{3, 4}));
  std::vector<float> out(4);
  file.read_block("a", 1, 2, 1, 2, out.data());  // rows 1-2, cols 1-2
  EXPECT_EQ(out, (std::vector<float>{a[5], a[6], a[9], a[10]}));
  std::vector<float> bias(2);
  file.read_block("b", 3, 2, 0, 1, bias.data());  // 1-D tensors are [n, 1]
  EXPECT_EQ(bias, (std::vector<float>{103.0f, 104.0f}));
  EXPECT_THROW(file.read_block("a", 2, 2, 0, 4, out.data()), UserError);  // past the last row
  EXPECT_THROW(file.info("missing"), UserError);
  std::remove(path.c_str());
}

TEST(Safetensors, Bf16RoundTripIsRounding) {
  std::vector<float> values = {1.0f, -2.5f, 3.14159265f, 1e-3f, 65504.0f};
  const std::string path = temp_path("bf16.safetensors");
  write_safetensors(path, {{"w", {5}, values.data()}}, Dtype::kBF16);
  SafetensorsFile file(path);
  std::vector<float> out(5);
  file.read_block("w", 0, 5, 0, 1, out.data());
  for (int i = 0; i < 5; ++i) {
    EXPECT_NEAR(out[i], values[i], std::fabs(values[i]) * 4e-3f);
    EXPECT_EQ(out[i], bf16_to_float(float_to_bf16(values[i])));
  }
  std::remove(path.c_str());
}

TEST(Safetensors, Conversions) {
  EXPECT_EQ(bf16_to_float(0x3F80), 1.0f);
  EXPECT_EQ(float_to_bf16(1.00390625f), 0x3F80);  // halfway: rounds to even
  EXPECT_EQ(float_to_bf16(1.01171875f), 0x3F82);  // 0x3F81 + half rounds up to even 0x3F82
  EXPECT_EQ(f16_to_float(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_float(0xC000), -2.0f);
  EXPECT_EQ(f16_to_float(0x7BFF), 65504.0f);
  EXPECT_FLOAT_EQ(f16_to_float(0x0001), 5.9604645e-8f);  // smallest subnormal
  EXPECT_TRUE(std::isinf(f16_to_float(0x7C00)));
  EXPECT_TRUE(std::isnan(f16_to_float(0x7E00)));
}

TEST(Safetensors, ReadsF16Tensors) {
  const std::string header = R"({"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})";
  const std::string path = temp_path("f16.safetensors");
  {
    std::ofstream out(path, std::ios::binary);
    const uint64_t length = header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((length >> (8 * i)) & 0xFF));
    out << header;
    const unsigned char data[4] = {0x00, 0x3C, 0x00, 0xC0};  // 1.0, -2.0 little endian
    out.write(reinterpret_cast<const char*>(data), 4);
  }
  SafetensorsFile file(path);
  std::vector<float> out(2);
  file.read_block("h", 0, 2, 0, 1, out.data());
  EXPECT_EQ(out, (std::vector<float>{1.0f, -2.0f}));
  std::remove(path.c_str());
}

TEST(SafetensorsMalformed, TooShort) {
  const std::string path = temp_path("short.safetensors");
  std::ofstream(path) << "abc";
  expect_user_error(path, "too short");
}

TEST(SafetensorsMalformed, HeaderLengthPastEnd) {
  expect_user_error(write_raw("past.safetensors", "{}", 0, 4096), "runs past the end");
}

TEST(SafetensorsMalformed, TwoGiBHeaderLength) {
  expect_user_error(write_raw("huge.safetensors", "{}", 0, 2ull << 30), "runs past the end");
}

TEST(SafetensorsMalformed, BadJson) {
  expect_user_error(write_raw("json.safetensors", "{\"a\": [", 0), "not a valid JSON");
}

TEST(SafetensorsMalformed, RangeOutsideData) {
  expect_user_error(write_raw("range.safetensors", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8),
                    "outside the data section");
}

TEST(SafetensorsMalformed, NegativeOffsets) {
  expect_user_error(write_raw("neg.safetensors", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 8),
                    "non-negative");
}

TEST(SafetensorsMalformed, RangeDoesNotMatchShape) {
  expect_user_error(write_raw("shape.safetensors", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
                    "shape needs 12");
}

TEST(SafetensorsMalformed, OverlappingTensors) {
  expect_user_error(write_raw("overlap.safetensors",
                              R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                              12),
                    "overlap");
}

// The ranges must tile the data section: bytes no tensor owns mean a header naming a tensor
// twice (JSON keeps one entry: the safetensors library refuses such a file) or an append.
TEST(SafetensorsMalformed, BytesNoTensorOwns) {
  expect_user_error(write_raw("twice.safetensors",
                              R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                              16),
                    "bytes [0, 8) of the data section belong to no tensor");
  expect_user_error(write_raw("appended.safetensors", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 72),
                    "holds 72 bytes but its tensors end at 8");
  expect_user_error(write_raw("gap.safetensors",
                              R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                              R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                              12),
                    "bytes [4, 8)");
  // Empty tensors take no bytes; an empty file none at all.
  EXPECT_EQ(SafetensorsFile(write_raw("empty_tensor.safetensors",
                                      R"({"e":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                                      R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                                      4))
                .tensors()
                .size(),
            2u);
  EXPECT_TRUE(SafetensorsFile(write_raw("no_tensors.safetensors", "{}", 0)).tensors().empty());
}

TEST(SafetensorsMalformed, UnknownDtype) {
  expect_user_error(write_raw("dtype.safetensors", R"({"a":{"dtype":"I8","shape":[2],"data_offsets":[0,2]}})", 2),
                    "unsupported dtype");
}

TEST(SafetensorsMalformed, MissingFields) {
  expect_user_error(write_raw("fields.safetensors", R"({"a":{"dtype":"F32"}})", 0), "needs dtype, shape");
}

TEST(SafetensorsMalformed, MissingFile) {
  expect_user_error(temp_path("does-not-exist"), "cannot read weights file");
}
