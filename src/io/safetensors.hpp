// safetensors: an 8-byte little-endian header length, a JSON header naming each tensor's
// dtype, shape and byte range, then the raw data. We read slices of tensors (a rank's
// layers and TP shard only) straight from the file with pread, converting to float32.
// F8_E4M3 tensors decode to their fp8 values here; applying their block scales is the
// checkpoint source's job (model/checkpoint_source.cpp), which knows the quantization.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pf::io {

// kF8E4M3 is e4m3fn (torch.float8_e4m3fn): read only, never written.
enum class Dtype { kF32, kBF16, kF16, kF8E4M3 };

int dtype_size(Dtype dtype);
const char* dtype_name(Dtype dtype);

struct TensorInfo {
  Dtype dtype = Dtype::kF32;
  std::vector<int64_t> shape;
  uint64_t file_begin = 0;  // absolute byte offsets in the file
  uint64_t file_end = 0;
  int64_t numel() const;
  // A 2-D view: [rows, cols]; a 1-D tensor of n elements is [n, 1].
  int64_t rows() const;
  int64_t cols() const;
};

// Upper bound on the JSON header; real checkpoints have headers of a few hundred KiB.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

class SafetensorsFile {
 public:
  // Parses and validates the header. Throws UserError on anything malformed: header length
  // past the end of the file or beyond kMaxHeaderBytes, bad JSON, unknown dtype, a byte range
  // outside the data section, a range that does not match the shape, overlapping tensors.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo& info(const std::string& name) const;  // UserError if absent
  // The header's __metadata__ (its string values).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Reads rows [row0, row0+rows) x cols [col0, col0+cols) of the 2-D view into `out`
  // (row-major, rows x cols floats), converting from the stored dtype.
  void read_block(const std::string& name, int64_t row0, int64_t rows, int64_t col0, int64_t cols, float* out) const;

  // Bytes [offset, offset + bytes) of the tensor's stored data, as they are in the file.
  void read_bytes(const std::string& name, uint64_t offset, uint64_t bytes, void* out) const;
  // A fingerprint of the tensor: name, dtype, shape and its stored bytes (all of them for a
  // tensor up to 1 MiB, evenly spaced samples beyond). Tells a rebuilt checkpoint apart.
  uint64_t content_fingerprint(const std::string& name) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

struct TensorToWrite {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;  // numel floats, row-major
};

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};

// The opening of a safetensors file whose data are written afterwards, in pieces: the 8-byte
// length and the JSON header (with `metadata` as __metadata__, padded so the data start
// 8-byte aligned), each tensor's first data byte in the file, and the file's whole size.
struct SafetensorsHeader {
  std::string bytes;
  std::map<std::string, uint64_t> data_begin;
  uint64_t file_size = 0;
};
SafetensorsHeader safetensors_header(const std::vector<TensorSpec>& tensors, Dtype dtype,
                                     const std::map<std::string, std::string>& metadata);

// Writes one safetensors file storing every tensor as `dtype` (converted from float32).
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors, Dtype dtype);

// Conversions used by the loader and the writer (exposed for tests).
float bf16_to_float(uint16_t bits);
uint16_t float_to_bf16(float value);  // round to nearest even
float f16_to_float(uint16_t bits);
// e4m3fn: exponent bias 7, 3 mantissa bits, subnormals, no infinities; 0x7F and 0xFF are
// the only NaNs, so the largest finite value is 448 (0x7E).
float fp8_e4m3fn_to_float(uint8_t bits);

}  // namespace pf::io
