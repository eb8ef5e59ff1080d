// FP8 (e4m3fn) checkpoints: every one of the 256 codes decoded against a formula and against
// torch.float8_e4m3fn, F8_E4M3 tensors read through the safetensors reader, quantization_config
// parsing and its refusals, and the checkpoint source's block dequantization of any slice.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "errors.hpp"
#include "io/safetensors.hpp"
#include "model/model_source.hpp"
#include "model/quantization.hpp"
#include "model/tensor_source.hpp"

using namespace pf;
namespace fs = std::filesystem;

namespace {

constexpr float kNaN = NAN;

// torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().tolist(), torch 2.15.
// clang-format off
const float kTorchE4M3fn[256] = {
    0.0f, 0.001953125f, 0.00390625f, 0.005859375f, 0.0078125f, 0.009765625f, 0.01171875f, 0.013671875f,  // 0x00
    0.015625f, 0.017578125f, 0.01953125f, 0.021484375f, 0.0234375f, 0.025390625f, 0.02734375f, 0.029296875f,  // 0x08
    0.03125f, 0.03515625f, 0.0390625f, 0.04296875f, 0.046875f, 0.05078125f, 0.0546875f, 0.05859375f,  // 0x10
    0.0625f, 0.0703125f, 0.078125f, 0.0859375f, 0.09375f, 0.1015625f, 0.109375f, 0.1171875f,  // 0x18
    0.125f, 0.140625f, 0.15625f, 0.171875f, 0.1875f, 0.203125f, 0.21875f, 0.234375f,  // 0x20
    0.25f, 0.28125f, 0.3125f, 0.34375f, 0.375f, 0.40625f, 0.4375f, 0.46875f,  // 0x28
    0.5f, 0.5625f, 0.625f, 0.6875f, 0.75f, 0.8125f, 0.875f, 0.9375f,  // 0x30
    1.0f, 1.125f, 1.25f, 1.375f, 1.5f, 1.625f, 1.75f, 1.875f,  // 0x38
    2.0f, 2.25f, 2.5f, 2.75f, 3.0f, 3.25f, 3.5f, 3.75f,  // 0x40
    4.0f, 4.5f, 5.0f, 5.5f, 6.0f, 6.5f, 7.0f, 7.5f,  // 0x48
    8.0f, 9.0f, 10.0f, 11.0f, 12.0f, 13.0f, 14.0f, 15.0f,  // 0x50
    16.0f, 18.0f, 20.0f, 22.0f, 24.0f, 26.0f, 28.0f, 30.0f,  // 0x58
    32.0f, 36.0f, 40.0f, 44.0f, 48.0f, 52.0f, 56.0f, 60.0f,  // 0x60
    64.0f, 72.0f, 80.0f, 88.0f, 96.0f, 104.0f, 112.0f, 120.0f,  // 0x68
    128.0f, 144.0f, 160.0f, 176.0f, 192.0f, 208.0f, 224.0f, 240.0f,  // 0x70
    256.0f, 288.0f, 320.0f, 352.0f, 384.0f, 416.0f, 448.0f, kNaN,  // 0x78
    -0.0f, -0.001953125f, -0.00390625f, -0.005859375f, -0.0078125f, -0.009765625f, -0.01171875f, -0.013671875f,  // 0x80
    -0.015625f, -0.017578125f, -0.01953125f, -0.021484375f, -0.0234375f, -0.025390625f, -0.02734375f, -0.029296875f,  // 0x88
    -0.03125f, -0.03515625f, -0.0390625f, -0.04296875f, -0.046875f, -0.05078125f, -0.0546875f, -0.05859375f,  // 0x90
    -0.0625f, -0.0703125f, -0.078125f, -0.0859375f, -0.09375f, -0.1015625f, -0.109375f, -0.1171875f,  // 0x98
    -0.125f, -0.140625f, -0.15625f, -0.171875f, -0.1875f, -0.203125f, -0.21875f, -0.234375f,  // 0xA0
    -0.25f, -0.28125f, -0.3125f, -0.34375f, -0.375f, -0.40625f, -0.4375f, -0.46875f,  // 0xA8
    -0.5f, -0.5625f, -0.625f, -0.6875f, -0.75f, -0.8125f, -0.875f, -0.9375f,  // 0xB0
    -1.0f, -1.125f, -1.25f, -1.375f, -1.5f, -1.625f, -1.75f, -1.875f,  // 0xB8
    -2.0f, -2.25f, -2.5f, -2.75f, -3.0f, -3.25f, -3.5f, -3.75f,  // 0xC0
    -4.0f, -4.5f, -5.0f, -5.5f, -6.0f, -6.5f, -7.0f, -7.5f,  // 0xC8
    -8.0f, -9.0f, -10.0f, -11.0f, -12.0f, -13.0f, -14.0f, -15.0f,  // 0xD0
    -16.0f, -18.0f, -20.0f, -22.0f, -24.0f, -26.0f, -28.0f, -30.0f,  // 0xD8
    -32.0f, -36.0f, -40.0f, -44.0f, -48.0f, -52.0f, -56.0f, -60.0f,  // 0xE0
    -64.0f, -72.0f, -80.0f, -88.0f, -96.0f, -104.0f, -112.0f, -120.0f,  // 0xE8
    -128.0f, -144.0f, -160.0f, -176.0f, -192.0f, -208.0f, -224.0f, -240.0f,  // 0xF0
    -256.0f, -288.0f, -320.0f, -352.0f, -384.0f, -416.0f, -448.0f, kNaN,  // 0xF8
};
// clang-format on

// The e4m3fn definition written out independently of the decoder: sign, 4-bit exponent with
// bias 7, 3-bit mantissa; exponent 0 is subnormal; S.1111.111 is NaN; nothing is infinite.
double reference_e4m3fn(int code) {
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  const int exponent = (code >> 3) & 15, mantissa = code & 7;
  if (exponent == 15 && mantissa == 7) return NAN;
  if (exponent == 0) return sign * (mantissa / 8.0) * std::pow(2.0, -6);
  return sign * (1.0 + mantissa / 8.0) * std::pow(2.0, exponent - 7);
}

bool same_float(float a, float b) {  // bit for bit, except that any NaN equals any NaN
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, sizeof a) == 0;  // tells -0 from +0
}

fs::path temp_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("pf_fp8_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A tensor as the file stores it: its dtype name and raw little-endian bytes.
struct RawTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

RawTensor f32_tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values) {
  return {name, "F32", std::move(shape),
          std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float))};
}

// write_safetensors writes one dtype for every tensor; these files mix F8, F32 and BF16.
void write_raw_safetensors(const fs::path& path, const std::vector<RawTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& t : tensors) {
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  const std::string text = header.dump();
  std::ofstream out(path, std::ios::binary);
  const uint64_t length = text.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((length >> (8 * i)) & 0xFF));
  out << text << data;
}

model::Quantization fp8_blocks(int rows, int cols) {
  model::Quantization q;
  q.method = model::Quantization::Method::kFp8Block;
  q.block_rows = rows;
  q.block_cols = cols;
  return q;
}

// A 5 x 7 FP8 weight in blocks of 2 x 4: neither dimension a multiple of its block, so the
// last block row and column are partial. Its codes walk every finite code; the 3 x 2 scales
// are powers of two and odd values alike.
constexpr int64_t kRows = 5, kCols = 7, kBlockRows = 2, kBlockCols = 4;
const std::vector<float> kScales = {0.5f, 3.0f, 0.0078125f, 1.7f, 0.01f, 250.0f};  // [3, 2]

std::string weight_codes() {
  std::string codes;
  for (int64_t i = 0; i < kRows * kCols; ++i) {
    int code = static_cast<int>((i * 37 + 11) % 256);
    if ((code & 0x7F) == 0x7F) code ^= 1;  // no NaN codes in a real weight
    codes.push_back(static_cast<char>(code));
  }
  return codes;
}

float expected_weight(int64_t r, int64_t c) {
  const auto code = static_cast<unsigned char>(weight_codes()[r * kCols + c]);
  return static_cast<float>(reference_e4m3fn(code)) * kScales[(r / kBlockRows) * 2 + c / kBlockCols];
}

fs::path write_fp8_checkpoint(const std::string& name, std::vector<RawTensor> extra = {}, bool with_scale = true) {
  const fs::path dir = temp_dir(name);
  std::vector<RawTensor> tensors = {{"w", "F8_E4M3", {kRows, kCols}, weight_codes()},
                                    f32_tensor("norm", {kCols}, {1, 2, 3, 4, 5, 6, 7})};
  if (with_scale) tensors.push_back(f32_tensor("w_scale_inv", {3, 2}, kScales));
  for (auto& t : extra) tensors.push_back(std::move(t));
  write_raw_safetensors(dir / "model.safetensors", tensors);
  return dir;
}

template <typename Call>
std::string user_error_of(Call&& call) {
  try {
    call();
  } catch (const UserError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no UserError";
  return "";
}

}  // namespace

TEST(Fp8E4M3, EveryCodeMatchesTheFormula) {
  for (int code = 0; code < 256; ++code)
    EXPECT_TRUE(
        same_float(io::fp8_e4m3fn_to_float(static_cast<uint8_t>(code)), static_cast<float>(reference_e4m3fn(code))))
        << "code 0x" << std::hex << code;
}

TEST(Fp8E4M3, EveryCodeMatchesTorch) {
  for (int code = 0; code < 256; ++code)
    EXPECT_TRUE(same_float(io::fp8_e4m3fn_to_float(static_cast<uint8_t>(code)), kTorchE4M3fn[code]))
        << "code 0x" << std::hex << code << ": " << io::fp8_e4m3fn_to_float(static_cast<uint8_t>(code)) << " vs "
        << kTorchE4M3fn[code];
}

TEST(Fp8E4M3, LandmarkCodes) {
  EXPECT_EQ(io::fp8_e4m3fn_to_float(0x7E), 448.0f);        // the largest finite value
  EXPECT_EQ(io::fp8_e4m3fn_to_float(0x78), 256.0f);        // the top exponent is finite ("fn")
  EXPECT_EQ(io::fp8_e4m3fn_to_float(0x01), 0.001953125f);  // smallest subnormal, 2^-9
  EXPECT_EQ(io::fp8_e4m3fn_to_float(0x08), 0.015625f);     // smallest normal, 2^-6
  EXPECT_EQ(io::fp8_e4m3fn_to_float(0x38), 1.0f);
  EXPECT_TRUE(std::signbit(io::fp8_e4m3fn_to_float(0x80)));  // -0
  EXPECT_TRUE(std::isnan(io::fp8_e4m3fn_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(io::fp8_e4m3fn_to_float(0xFF)));
  for (int code = 0; code < 256; ++code) EXPECT_FALSE(std::isinf(io::fp8_e4m3fn_to_float(static_cast<uint8_t>(code))));
}

TEST(Fp8Safetensors, ReadsEveryCodeAndSlices) {
  const fs::path dir = temp_dir("reader");
  std::string codes;
  for (int code = 0; code < 256; ++code) codes.push_back(static_cast<char>(code));
  write_raw_safetensors(dir / "all.safetensors", {{"codes", "F8_E4M3", {16, 16}, codes}});
  const io::SafetensorsFile file((dir / "all.safetensors").string());
  EXPECT_EQ(file.info("codes").dtype, io::Dtype::kF8E4M3);
  EXPECT_EQ(io::dtype_size(io::Dtype::kF8E4M3), 1);
  EXPECT_STREQ(io::dtype_name(io::Dtype::kF8E4M3), "F8_E4M3");
  std::vector<float> all(256);
  file.read_block("codes", 0, 16, 0, 16, all.data());  // whole rows: one read
  for (int code = 0; code < 256; ++code) EXPECT_TRUE(same_float(all[code], kTorchE4M3fn[code])) << code;
  std::vector<float> slice(3 * 5);
  file.read_block("codes", 7, 3, 2, 5, slice.data());  // row by row
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 5; ++c) EXPECT_TRUE(same_float(slice[r * 5 + c], kTorchE4M3fn[(7 + r) * 16 + 2 + c]));
  // One byte per element in the header checks, and in the fingerprint's identity.
  write_raw_safetensors(dir / "short.safetensors", {{"w", "F8_E4M3", {4}, std::string(8, '\0')}});
  EXPECT_NE(user_error_of([&] { io::SafetensorsFile((dir / "short.safetensors").string()); }).find("shape needs 4"),
            std::string::npos);
  const std::string e5m2 = user_error_of([&] {
    write_raw_safetensors(dir / "e5m2.safetensors", {{"w", "F8_E5M2", {2}, std::string(2, '\0')}});
    io::SafetensorsFile((dir / "e5m2.safetensors").string());
  });
  EXPECT_NE(e5m2.find("unsupported dtype F8_E5M2 (supported: F32, BF16, F16, F8_E4M3)"), std::string::npos) << e5m2;
  float one = 1.0f;
  EXPECT_NE(user_error_of([&] {
              io::write_safetensors((dir / "w.safetensors").string(), {{"x", {1}, &one}}, io::Dtype::kF8E4M3);
            }).find("writing F8_E4M3 checkpoints is not supported"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "w.safetensors"));
  fs::remove_all(dir);
}

TEST(Fp8Quantization, ReadsBlockFp8AndNothingElse) {
  const auto parse = [](const nlohmann::json& config) { return model::parse_quantization(config, "cfg.json"); };
  EXPECT_FALSE(parse(nlohmann::json::object()).fp8());
  EXPECT_FALSE(parse({{"quantization_config", nullptr}}).fp8());
  const model::Quantization deepseek = parse(nlohmann::json::parse(
      R"({"quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
          "weight_block_size": [128, 128]}})"));
  EXPECT_TRUE(deepseek.fp8());
  EXPECT_EQ(deepseek.block_rows, 128);
  EXPECT_EQ(deepseek.block_cols, 128);
  // transformers' FineGrainedFP8Config writes no fmt; dynamic is its default scheme.
  const model::Quantization plain =
      parse({{"quantization_config", {{"quant_method", "fp8"}, {"weight_block_size", {16, 32}}}}});
  EXPECT_TRUE(plain.fp8());
  EXPECT_EQ(plain.block_rows, 16);
  EXPECT_EQ(plain.block_cols, 32);
}

TEST(Fp8Quantization, EveryOtherSchemeIsAUserErrorNamingItsField) {
  const nlohmann::json good = {
      {"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}}};
  const auto error_with = [&](const std::string& key, const nlohmann::json& value) {
    nlohmann::json q = good;
    if (value.is_discarded())
      q.erase(key);
    else
      q[key] = value;
    return user_error_of([&] { model::parse_quantization({{"quantization_config", q}}, "cfg.json"); });
  };
  const auto expect = [](const std::string& message, const std::string& field, const std::string& fragment) {
    EXPECT_EQ(message.rfind("cfg.json: ", 0), 0u) << message;
    EXPECT_NE(message.find(field), std::string::npos) << message;
    EXPECT_NE(message.find(fragment), std::string::npos) << message;
  };
  const nlohmann::json absent = nlohmann::json(nlohmann::json::value_t::discarded);
  for (const char* method : {"gptq", "awq", "bitsandbytes", "compressed-tensors", "fbgemm_fp8", "FP8"})
    expect(error_with("quant_method", method), "field \"quantization_config.quant_method\" must be \"fp8\"",
           std::string("(got \"") + method + "\")");
  expect(error_with("quant_method", absent), "missing field \"quantization_config.quant_method\"", "");
  expect(error_with("quant_method", 8), "quantization_config.quant_method", "must be a string");
  expect(error_with("fmt", "e5m2"), "field \"quantization_config.fmt\" must be \"e4m3\"", "(got \"e5m2\")");
  expect(error_with("activation_scheme", "static"), "field \"quantization_config.activation_scheme\"", "float32/bf16");
  for (const nlohmann::json& block :
       {nlohmann::json::array({128}), nlohmann::json::array({128, 128, 1}), nlohmann::json::array({0, 128}),
        nlohmann::json::array({128, -1}), nlohmann::json::array({128.5, 128}), nlohmann::json::array({"128", 128}),
        nlohmann::json::array({true, 128}), nlohmann::json(128), nlohmann::json::array({1LL << 40, 128})})
    expect(error_with("weight_block_size", block), "field \"quantization_config.weight_block_size\"",
           "must be two positive integers");
  expect(error_with("weight_block_size", absent), "missing field \"quantization_config.weight_block_size\"", "");
  expect(user_error_of([] {
           model::parse_quantization({{"quantization_config", "fp8"}}, "cfg.json");
         }),
         "field \"quantization_config\"", "must be an object");
}

TEST(Fp8Checkpoint, EverySliceIsDequantizedBlockByBlock) {
  const fs::path dir = write_fp8_checkpoint("slices");
  const auto source = model::open_checkpoint(dir.string(), fp8_blocks(kBlockRows, kBlockCols));
  EXPECT_TRUE(source->has("w"));
  EXPECT_EQ(source->shape("w"), (std::vector<int64_t>{kRows, kCols}));
  // Every slice a TP rank could ask for, aligned to the blocks or not.
  int slices = 0;
  for (int64_t row0 = 0; row0 < kRows; ++row0)
    for (int64_t rows = 1; row0 + rows <= kRows; ++rows)
      for (int64_t col0 = 0; col0 < kCols; ++col0)
        for (int64_t cols = 1; col0 + cols <= kCols; ++cols) {
          std::vector<float> out(static_cast<size_t>(rows * cols));
          source->read_block("w", row0, rows, col0, cols, out.data());
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c)
              ASSERT_TRUE(same_float(out[r * cols + c], expected_weight(row0 + r, col0 + c)))
                  << "slice rows " << row0 << "+" << rows << " cols " << col0 << "+" << cols << " at " << r << "," << c
                  << ": " << out[r * cols + c] << " vs " << expected_weight(row0 + r, col0 + c);
          ++slices;
        }
  EXPECT_EQ(slices, 15 * 28);
  std::vector<float> norm(kCols);  // unquantized tensors read as before
  source->read_block("norm", 0, kCols, 0, 1, norm.data());
  EXPECT_EQ(norm, (std::vector<float>{1, 2, 3, 4, 5, 6, 7}));
  fs::remove_all(dir);
}

TEST(Fp8Checkpoint, Bf16ScalesAndShardedFiles) {
  // The scales in a shard of their own, stored as bf16 (exact for these values).
  const fs::path dir = temp_dir("sharded");
  write_raw_safetensors(dir / "a.safetensors", {{"w", "F8_E4M3", {kRows, kCols}, weight_codes()}});
  std::string scale_bytes;
  for (float s : {0.5f, 3.0f, 0.0078125f, 1.75f, 0.015625f, 256.0f}) {
    const uint16_t bits = io::float_to_bf16(s);
    scale_bytes.append(reinterpret_cast<const char*>(&bits), 2);
  }
  write_raw_safetensors(dir / "b.safetensors", {{"w_scale_inv", "BF16", {3, 2}, scale_bytes}});
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"weight_map": {"w": "a.safetensors", "w_scale_inv": "b.safetensors"}})";
  const auto source = model::open_checkpoint(dir.string(), fp8_blocks(kBlockRows, kBlockCols));
  std::vector<float> out(kRows * kCols);
  source->read_block("w", 0, kRows, 0, kCols, out.data());
  const float scales[6] = {0.5f, 3.0f, 0.0078125f, 1.75f, 0.015625f, 256.0f};
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < kCols; ++c) {
      const auto code = static_cast<unsigned char>(weight_codes()[r * kCols + c]);
      EXPECT_TRUE(same_float(out[r * kCols + c], kTorchE4M3fn[code] * scales[(r / kBlockRows) * 2 + c / kBlockCols]));
    }
  fs::remove_all(dir);
}

TEST(Fp8Checkpoint, FingerprintCoversTheScales) {
  const fs::path a = write_fp8_checkpoint("fingerprint_a");
  std::vector<float> other = kScales;
  other[5] = 251.0f;  // same codes, one block's scale changed
  const fs::path b = temp_dir("fingerprint_b");
  write_raw_safetensors(b / "model.safetensors", {{"w", "F8_E4M3", {kRows, kCols}, weight_codes()},
                                                  f32_tensor("norm", {kCols}, {1, 2, 3, 4, 5, 6, 7}),
                                                  f32_tensor("w_scale_inv", {3, 2}, other)});
  const auto source_a = model::open_checkpoint(a.string(), fp8_blocks(kBlockRows, kBlockCols));
  const auto source_b = model::open_checkpoint(b.string(), fp8_blocks(kBlockRows, kBlockCols));
  EXPECT_NE(source_a->fingerprint("w"), source_b->fingerprint("w"));
  EXPECT_EQ(source_a->fingerprint("norm"), source_b->fingerprint("norm"));
  EXPECT_EQ(source_a->fingerprint("w"),
            model::open_checkpoint(a.string(), fp8_blocks(kBlockRows, kBlockCols))->fingerprint("w"));
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(Fp8Checkpoint, BadScalesAreUserErrorsNamingBothTensors) {
  const auto errors_of = [](const fs::path& dir, const model::Quantization& q) {
    const auto source = model::open_checkpoint(dir.string(), q);
    float out[kRows * kCols];
    // shape() (the writer's validation), read_block() (every rank's load) and fingerprint()
    // all refuse it, with the same message.
    const std::string message = user_error_of([&] { source->shape("w"); });
    EXPECT_EQ(user_error_of([&] { source->read_block("w", 0, 1, 0, 1, out); }), message);
    EXPECT_EQ(user_error_of([&] { source->fingerprint("w"); }), message);
    return message;
  };
  const auto expect_has = [](const std::string& message, std::vector<std::string> fragments) {
    for (const auto& fragment : fragments) EXPECT_NE(message.find(fragment), std::string::npos) << message;
  };
  const fs::path missing = write_fp8_checkpoint("missing_scale", {}, /*with_scale=*/false);
  expect_has(
      errors_of(missing, fp8_blocks(2, 4)),
      {"tensor w is stored as F8_E4M3", "scale tensor w_scale_inv is missing", "needs shape [3, 2]", "blocks of 2x4"});
  const fs::path wrong = temp_dir("wrong_scale");
  write_raw_safetensors(wrong / "model.safetensors", {{"w", "F8_E4M3", {kRows, kCols}, weight_codes()},
                                                      f32_tensor("w_scale_inv", {2, 2}, {1, 1, 1, 1})});
  expect_has(errors_of(wrong, fp8_blocks(2, 4)),
             {"tensor w_scale_inv has shape [2, 2]", "but w needs one scale per block, shape [3, 2]"});
  // The right shape for another block size is still wrong: [3, 2] is not [5, 2] for 1x4 blocks.
  const fs::path good = write_fp8_checkpoint("other_blocks");
  expect_has(errors_of(good, fp8_blocks(1, 4)), {"w_scale_inv has shape [3, 2]", "shape [5, 2]"});
  expect_has(errors_of(good, model::Quantization{}),
             {"tensor w is stored as F8_E4M3 but config.json has no FP8 quantization_config"});
  const fs::path f8_scale = temp_dir("f8_scale");
  write_raw_safetensors(f8_scale / "model.safetensors", {{"w", "F8_E4M3", {kRows, kCols}, weight_codes()},
                                                         {"w_scale_inv", "F8_E4M3", {3, 2}, std::string(6, '\x38')}});
  expect_has(errors_of(f8_scale, fp8_blocks(2, 4)), {"w_scale_inv is stored as F8_E4M3", "F32, BF16 or F16"});
  const fs::path vector = temp_dir("f8_vector");
  write_raw_safetensors(vector / "model.safetensors",
                        {{"w", "F8_E4M3", {4}, std::string(4, '\x38')}, f32_tensor("w_scale_inv", {1, 1}, {1})});
  expect_has(errors_of(vector, fp8_blocks(2, 4)), {"with shape [4]", "2-D [out, in]"});
  for (const auto& dir : {missing, wrong, good, f8_scale, vector}) fs::remove_all(dir);
}

TEST(Fp8Checkpoint, OpenModelPassesConfigJsonsQuantization) {
  const nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}},
                                 {"hidden_size", 8},
                                 {"intermediate_size", 8},
                                 {"num_hidden_layers", 1},
                                 {"num_attention_heads", 2},
                                 {"vocab_size", 16}};
  const fs::path dir = write_fp8_checkpoint("open_model");
  nlohmann::json quantized = config;
  quantized["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {kBlockRows, kBlockCols}}};
  std::ofstream(dir / "config.json") << quantized.dump();
  std::vector<float> out(kRows * kCols);
  model::open_model(dir.string(), 0).tensors->read_block("w", 0, kRows, 0, kCols, out.data());
  EXPECT_TRUE(same_float(out[kCols + 5], expected_weight(1, 5)));
  std::ofstream(dir / "config.json") << config.dump();  // the same files, no quantization_config
  const auto plain = model::open_model(dir.string(), 0);
  EXPECT_NE(user_error_of([&] { plain.tensors->shape("w"); }).find("no FP8 quantization_config"), std::string::npos);
  nlohmann::json gptq = config;
  gptq["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}};
  std::ofstream(dir / "config.json") << gptq.dump();
  const std::string message = user_error_of([&] { model::open_model(dir.string(), 0); });
  EXPECT_NE(message.find((dir / "config.json").string() + ": field \"quantization_config.quant_method\""),
            std::string::npos)
      << message;
  fs::remove_all(dir);
}
