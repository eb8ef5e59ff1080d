// safetensors reading (validated header, sliced pread) and writing.
#include "io/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "errors.hpp"
#include "io/bf16.hpp"
#include "io/file_checks.hpp"
#include "io/fnv1a.hpp"
#include "io/positioned_io.hpp"

namespace pf::io {

int dtype_size(Dtype dtype) {
  switch (dtype) {
    case Dtype::kF32:
      return 4;
    case Dtype::kBF16:
    case Dtype::kF16:
      return 2;
    case Dtype::kF8E4M3:
      return 1;
  }
  return 4;
}
const char* dtype_name(Dtype dtype) {
  switch (dtype) {
    case Dtype::kF32:
      return "F32";
    case Dtype::kBF16:
      return "BF16";
    case Dtype::kF16:
      return "F16";
    case Dtype::kF8E4M3:
      return "F8_E4M3";
  }
  return "?";
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}
int64_t TensorInfo::rows() const {
  return shape.empty() ? 1 : shape[0];
}
int64_t TensorInfo::cols() const {
  return shape.size() >= 2 ? numel() / shape[0] : 1;
}

// One rounding for the whole program: io/bf16.hpp's (the cpu backend's and the exports').
float bf16_to_float(uint16_t bits) {
  return bf16::to_float(bits);
}

uint16_t float_to_bf16(float value) {
  return bf16::from_float(value);
}

float f16_to_float(uint16_t bits) {
  const uint32_t sign = (bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1F;
  uint32_t mantissa = bits & 0x3FF;
  uint32_t word;
  if (exponent == 0x1F) {
    word = sign | 0x7F800000u | (mantissa << 13);
  } else if (exponent != 0) {
    word = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    word = sign;
  } else {  // subnormal: normalise
    exponent = 113;
    while ((mantissa & 0x400) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    word = sign | (exponent << 23) | ((mantissa & 0x3FF) << 13);
  }
  float value;
  std::memcpy(&value, &word, 4);
  return value;
}

float fp8_e4m3fn_to_float(uint8_t bits) {
  const float sign = (bits & 0x80) ? -1.0f : 1.0f;
  const int exponent = (bits >> 3) & 0xF;
  const int mantissa = bits & 0x7;
  // "fn": the all-ones exponent still holds finite values (256..448); only its all-ones
  // mantissa is NaN, and there is no infinity.
  if (exponent == 0xF && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);  // m/8 * 2^(1-7)
  return sign * std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);      // (1+m/8) * 2^(e-7)
}

namespace {

// All 256 codes decoded once: a checkpoint's FP8 weights are billions of table look-ups.
const std::array<float, 256>& fp8_e4m3fn_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> values{};
    for (int code = 0; code < 256; ++code) values[code] = fp8_e4m3fn_to_float(static_cast<uint8_t>(code));
    return values;
  }();
  return table;
}

Dtype parse_dtype(const std::string& name, const std::string& where) {
  if (name == "F32") return Dtype::kF32;
  if (name == "BF16") return Dtype::kBF16;
  if (name == "F16") return Dtype::kF16;
  if (name == "F8_E4M3") return Dtype::kF8E4M3;
  throw UserError(where + ": unsupported dtype " + name + " (supported: F32, BF16, F16, F8_E4M3)");
}

void pread_all(int fd, void* out, size_t bytes, uint64_t offset, const std::string& path) {
  if (!read_at(fd, out, bytes, offset))
    throw UserError(path + ": read failed at byte " + std::to_string(offset) + " (truncated file?)");
}

void convert_to_float(Dtype dtype, const char* raw, int64_t count, float* out) {
  switch (dtype) {
    case Dtype::kF32:
      std::memcpy(out, raw, static_cast<size_t>(count) * 4);
      break;
    case Dtype::kBF16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t bits;
        std::memcpy(&bits, raw + 2 * i, 2);
        out[i] = bf16_to_float(bits);
      }
      break;
    case Dtype::kF16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t bits;
        std::memcpy(&bits, raw + 2 * i, 2);
        out[i] = f16_to_float(bits);
      }
      break;
    case Dtype::kF8E4M3: {
      const std::array<float, 256>& table = fp8_e4m3fn_table();
      for (int64_t i = 0; i < count; ++i) out[i] = table[static_cast<unsigned char>(raw[i])];
      break;
    }
  }
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  require_regular_file(path, "weights file");  // a FIFO would block open() forever
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw UserError("cannot open weights file " + path + ": " + std::strerror(errno));
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw UserError("cannot stat " + path);
    const uint64_t file_size = static_cast<uint64_t>(st.st_size);
    if (file_size < 8) throw UserError(path + ": too short to be a safetensors file");
    unsigned char length_bytes[8];
    pread_all(fd_, length_bytes, 8, 0, path);
    uint64_t header_bytes = 0;
    for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | length_bytes[i];
    if (header_bytes > file_size - 8)
      throw UserError(path + ": header length " + std::to_string(header_bytes) + " runs past the end of the file (" +
                      std::to_string(file_size) + " bytes)");
    if (header_bytes > kMaxHeaderBytes)
      throw UserError(path + ": header length " + std::to_string(header_bytes) + " exceeds the 100 MiB limit");
    std::string header(header_bytes, '\0');
    pread_all(fd_, header.data(), header_bytes, 8, path);

    nlohmann::json json = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded() || !json.is_object()) throw UserError(path + ": header is not a valid JSON object");

    const uint64_t data_begin = 8 + header_bytes;
    const uint64_t data_size = file_size - data_begin;
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (auto& [name, entry] : json.items()) {
      if (name == "__metadata__") {
        // Free-form strings by the format's definition; anything else in it is ignored.
        if (entry.is_object())
          for (auto& [key, value] : entry.items())
            if (value.is_string()) metadata_[key] = value.get<std::string>();
        continue;
      }
      const std::string where = path + ": tensor " + name;
      if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
          !entry.contains("data_offsets") || !entry["dtype"].is_string() || !entry["shape"].is_array() ||
          !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2)
        throw UserError(where + ": entry needs dtype, shape and data_offsets [begin, end]");
      TensorInfo info;
      info.dtype = parse_dtype(entry["dtype"].get<std::string>(), where);
      for (auto& dim : entry["shape"]) {
        if (!dim.is_number_integer() || dim.get<int64_t>() < 0)
          throw UserError(where + ": shape must hold non-negative integers");
        info.shape.push_back(dim.get<int64_t>());
      }
      for (auto& offset : entry["data_offsets"])
        if (!offset.is_number_unsigned()) throw UserError(where + ": data_offsets must be non-negative integers");
      const uint64_t begin = entry["data_offsets"][0].get<uint64_t>();
      const uint64_t end = entry["data_offsets"][1].get<uint64_t>();
      if (begin > end || end > data_size)
        throw UserError(where + ": byte range [" + std::to_string(begin) + ", " + std::to_string(end) +
                        ") lies outside the data section (" + std::to_string(data_size) + " bytes)");
      uint64_t expected = static_cast<uint64_t>(dtype_size(info.dtype));
      for (int64_t dim : info.shape)
        if (__builtin_mul_overflow(expected, static_cast<uint64_t>(dim), &expected))
          throw UserError(where + ": shape is too large (its byte size overflows)");
      if (end - begin != expected)
        throw UserError(where + ": byte range holds " + std::to_string(end - begin) + " bytes but the shape needs " +
                        std::to_string(expected));
      info.file_begin = data_begin + begin;
      info.file_end = data_begin + end;
      ranges.emplace_back(begin, end);
      tensors_.emplace(name, std::move(info));
    }
    // The format's own rule (and the safetensors library's check): the tensors' ranges tile the
    // data section, from its first byte to its last, without overlap or gap. A gap is bytes no
    // tensor owns: a header naming a tensor twice (JSON keeps one of them), or a truncated or
    // appended write.
    std::sort(ranges.begin(), ranges.end());
    uint64_t covered = 0;
    for (const auto& [begin, end] : ranges) {
      if (begin < covered) throw UserError(path + ": tensors' byte ranges overlap");
      if (begin > covered)
        throw UserError(path + ": bytes [" + std::to_string(covered) + ", " + std::to_string(begin) +
                        ") of the data section belong to no tensor (a tensor named twice in the header?)");
      covered = end;
    }
    if (covered != data_size)
      throw UserError(path + ": the data section holds " + std::to_string(data_size) +
                      " bytes but its tensors end at " + std::to_string(covered) +
                      " (bytes appended, or a tensor named twice in the header?)");
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw UserError(path_ + ": tensor " + name + " is missing");
  return it->second;
}

void SafetensorsFile::read_block(const std::string& name, int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                                 float* out) const {
  const TensorInfo& t = info(name);
  if (row0 < 0 || col0 < 0 || row0 + rows > t.rows() || col0 + cols > t.cols())
    throw UserError(path_ + ": tensor " + name + " is smaller than the slice the model needs");
  const int elem = dtype_size(t.dtype);
  const uint64_t row_bytes = static_cast<uint64_t>(t.cols()) * elem;
  // One reused buffer of at most 8 MiB of file bytes: read, converted while still in cache.
  constexpr int64_t kBlockBytes = int64_t{8} << 20;
  thread_local std::vector<char> raw;
  if (cols == t.cols()) {  // whole rows: contiguous, read in blocks
    const int64_t total = rows * cols, block = std::max<int64_t>(1, kBlockBytes / elem);
    raw.resize(static_cast<size_t>(std::min(total, block) * elem));
    for (int64_t done = 0; done < total; done += block) {
      const int64_t count = std::min(block, total - done);
      pread_all(fd_, raw.data(), static_cast<size_t>(count * elem), t.file_begin + row0 * row_bytes + done * elem,
                path_);
      convert_to_float(t.dtype, raw.data(), count, out + done);
    }
    return;
  }
  raw.resize(static_cast<size_t>(cols * elem));
  for (int64_t r = 0; r < rows; ++r) {
    pread_all(fd_, raw.data(), raw.size(), t.file_begin + (row0 + r) * row_bytes + col0 * elem, path_);
    convert_to_float(t.dtype, raw.data(), cols, out + r * cols);
  }
}

SafetensorsHeader safetensors_header(const std::vector<TensorSpec>& tensors, Dtype dtype,
                                     const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = nlohmann::json::object();
  for (const auto& [key, value] : metadata) header["__metadata__"][key] = value;
  SafetensorsHeader result;
  uint64_t offset = 0;
  std::map<std::string, uint64_t> relative;
  for (const auto& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    const uint64_t bytes = static_cast<uint64_t>(numel) * dtype_size(dtype);
    header[t.name] = {{"dtype", dtype_name(dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    relative[t.name] = offset;
    offset += bytes;
  }
  std::string text = header.dump();
  while ((text.size() + 8) % 8 != 0) text.push_back(' ');  // keep the data 8-byte aligned
  const uint64_t length = text.size();
  for (int i = 0; i < 8; ++i) result.bytes.push_back(static_cast<char>((length >> (8 * i)) & 0xFF));
  result.bytes += text;
  for (const auto& [name, at] : relative) result.data_begin[name] = result.bytes.size() + at;
  result.file_size = result.bytes.size() + offset;
  return result;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors, Dtype dtype) {
  std::vector<TensorSpec> specs;
  for (const auto& t : tensors) specs.push_back({t.name, t.shape});
  if (dtype != Dtype::kF32 && dtype != Dtype::kBF16)  // checked before the file is created
    throw UserError(std::string("writing ") + dtype_name(dtype) + " checkpoints is not supported; use f32 or bf16");
  const SafetensorsHeader header = safetensors_header(specs, dtype, {{"format", "pt"}});
  std::ofstream out(path, std::ios::binary);
  if (!out) throw UserError("cannot write " + path);
  out.write(header.bytes.data(), static_cast<std::streamsize>(header.bytes.size()));
  std::vector<uint16_t> half;
  for (const auto& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    if (dtype == Dtype::kF32) {
      out.write(reinterpret_cast<const char*>(t.data), numel * 4);
    } else {
      half.resize(static_cast<size_t>(numel));
      for (int64_t i = 0; i < numel; ++i) half[i] = float_to_bf16(t.data[i]);
      out.write(reinterpret_cast<const char*>(half.data()), numel * 2);
    }
  }
  if (!out) throw UserError("write failed: " + path + " (disk full?)");
}

void SafetensorsFile::read_bytes(const std::string& name, uint64_t offset, uint64_t bytes, void* out) const {
  const TensorInfo& t = info(name);
  if (offset + bytes > t.file_end - t.file_begin)
    throw UserError(path_ + ": tensor " + name + " is smaller than the bytes asked for");
  pread_all(fd_, out, bytes, t.file_begin + offset, path_);
}

uint64_t SafetensorsFile::content_fingerprint(const std::string& name) const {
  const TensorInfo& t = info(name);
  Fnv1a hash;
  hash.add(name).add_value(static_cast<int>(t.dtype));
  for (int64_t d : t.shape) hash.add_value(d);
  const uint64_t bytes = t.file_end - t.file_begin;
  // Small tensors whole; large ones by 16 windows spread over them, first and last bytes
  // included: enough to tell a rebuilt or re-trained checkpoint, at a few reads per tensor.
  constexpr uint64_t kWhole = 1 << 20, kWindows = 16, kWindow = 4096;
  std::vector<unsigned char> buffer(std::min(bytes, kWhole));
  if (bytes <= kWhole) {
    pread_all(fd_, buffer.data(), bytes, t.file_begin, path_);
    hash.add(buffer.data(), bytes);
  } else {
    for (uint64_t w = 0; w < kWindows; ++w) {
      const uint64_t offset = t.file_begin + (bytes - kWindow) * w / (kWindows - 1);
      pread_all(fd_, buffer.data(), kWindow, offset, path_);
      hash.add(buffer.data(), kWindow);
    }
  }
  return hash.value;
}

}  // namespace pf::io
