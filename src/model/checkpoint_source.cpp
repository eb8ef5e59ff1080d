// The checkpoint-directory tensor source: config.json's neighbours model.safetensors or the
// shards model.safetensors.index.json lists, opened lazily so a rank touches only its own
// (check_storage reads every shard's header once, on the rank that validates the checkpoint).
// Block-quantized FP8 weights are dequantized here, slice by slice, into the float32 the
// backends compute in: the loader above never sees a stored dtype or a scale.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "errors.hpp"
#include "io/file_checks.hpp"
#include "io/fnv1a.hpp"
#include "io/safetensors.hpp"
#include "model/quantization.hpp"
#include "model/tensor_source.hpp"

namespace pf::model {
namespace fs = std::filesystem;
namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

class CheckpointSource final : public TensorSource {
 public:
  CheckpointSource(const std::string& directory, const Quantization& quantization)
      : directory_(directory), quantization_(quantization) {
    const fs::path index_path = fs::path(directory) / "model.safetensors.index.json";
    const fs::path single_path = fs::path(directory) / "model.safetensors";
    // Both: which one holds the model is anyone's guess (transformers reads the single
    // file, an index beside it is often a sharded download's leftover): the user says.
    if (fs::exists(index_path) && fs::exists(single_path))
      throw UserError(directory +
                      " holds both model.safetensors and model.safetensors.index.json (two checkpoints?): "
                      "remove the one that is not this model's");
    if (fs::exists(index_path)) {
      io::require_regular_file(index_path.string(), "weight index");
      std::ifstream in(index_path);
      nlohmann::json index = nlohmann::json::parse(in, nullptr, false);
      if (index.is_discarded() || !index.contains("weight_map") || !index["weight_map"].is_object())
        throw UserError(index_path.string() + ": malformed index (needs a \"weight_map\" object)");
      for (auto& [name, file] : index["weight_map"].items()) {
        if (!file.is_string()) throw UserError(index_path.string() + ": weight_map values must be file names");
        file_of_[name] = (fs::path(directory) / file.get<std::string>()).string();
      }
      index_path_ = index_path.string();
    } else if (fs::exists(single_path)) {
      auto& file = open(single_path.string());
      for (auto& [name, info] : file.tensors()) file_of_[name] = single_path.string();
    } else {
      throw UserError("no weights in " + directory + " (expected model.safetensors or model.safetensors.index.json)");
    }
  }

  bool has(const std::string& name) const override { return file_of_.count(name) != 0; }
  std::vector<std::string> names() const override {
    std::vector<std::string> all;
    for (const auto& [name, file] : file_of_) all.push_back(name);
    return all;
  }
  std::vector<int64_t> shape(const std::string& name) const override { return checked_info(name).shape; }
  void read_block(const std::string& name, int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                  float* out) const override {
    const bool fp8 = checked_info(name).dtype == io::Dtype::kF8E4M3;
    file_for(name).read_block(name, row0, rows, col0, cols, out);  // FP8 codes decoded, not yet scaled
    if (fp8) apply_block_scales(name, row0, rows, col0, cols, out);
  }
  // An FP8 weight's values are its codes and its scales: a changed scale is a changed model.
  uint64_t fingerprint(const std::string& name) const override {
    const uint64_t stored = file_for(name).content_fingerprint(name);
    if (checked_info(name).dtype != io::Dtype::kF8E4M3) return stored;
    const std::string scale = scale_name(name);
    return io::Fnv1a().add_value(stored).add_value(file_for(scale).content_fingerprint(scale)).value;
  }

  void check_storage() const override {
    if (!index_path_.empty()) check_shards_match_index(index_path_);
  }

 private:
  static std::string scale_name(const std::string& name) { return name + "_scale_inv"; }

  // The tensor's header, after checking that an F8_E4M3 tensor can be dequantized: the config
  // declares block FP8 and the companion scale has exactly one entry per block. Every
  // question about a tensor goes through here, so the writer rank's validate_tensors (shape
  // of every tensor) refuses a bad checkpoint before any rank loads a slice of it.
  const io::TensorInfo& checked_info(const std::string& name) const {
    const io::TensorInfo& weight = info(name);
    if (weight.dtype != io::Dtype::kF8E4M3) return weight;
    const std::string where = directory_ + ": tensor " + name + " is stored as F8_E4M3";
    if (!quantization_.fp8())
      throw UserError(where +
                      " but config.json has no FP8 quantization_config (quant_method \"fp8\" with its "
                      "weight_block_size), so its scales cannot be applied");
    if (weight.shape.size() != 2)
      throw UserError(where + " with shape " + shape_text(weight.shape) +
                      "; pipefill dequantizes FP8 linear weights, which are 2-D [out, in]");
    const std::vector<int64_t> grid = {ceil_div(weight.shape[0], quantization_.block_rows),
                                       ceil_div(weight.shape[1], quantization_.block_cols)};
    const std::string blocks = " (" + shape_text(weight.shape) + " in blocks of " +
                               std::to_string(quantization_.block_rows) + "x" +
                               std::to_string(quantization_.block_cols) + ", quantization_config.weight_block_size)";
    const std::string scale = scale_name(name);
    if (!has(scale))
      throw UserError(where + " but its scale tensor " + scale + " is missing; it needs shape " + shape_text(grid) +
                      blocks);
    const io::TensorInfo& scale_info = info(scale);
    if (scale_info.shape != grid)
      throw UserError(directory_ + ": tensor " + scale + " has shape " + shape_text(scale_info.shape) + " but " + name +
                      " needs one scale per block, shape " + shape_text(grid) + blocks);
    if (scale_info.dtype == io::Dtype::kF8E4M3)
      throw UserError(directory_ + ": tensor " + scale + " is stored as F8_E4M3; the scales of " + name +
                      " must be F32, BF16 or F16");
    return weight;
  }

  // Multiplies a decoded slice by its blocks' scales. The slice may start and end anywhere
  // inside a block (a TP rank's rows or columns need not align to the blocks), so the scale
  // rows and columns it touches are read, and each element takes its own block's scale.
  void apply_block_scales(const std::string& name, int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                          float* out) const {
    if (rows <= 0 || cols <= 0) return;
    const int64_t block_rows = quantization_.block_rows, block_cols = quantization_.block_cols;
    const int64_t grid_row0 = row0 / block_rows, grid_rows = (row0 + rows - 1) / block_rows - grid_row0 + 1;
    const int64_t grid_col0 = col0 / block_cols, grid_cols = (col0 + cols - 1) / block_cols - grid_col0 + 1;
    std::vector<float> scales(static_cast<size_t>(grid_rows * grid_cols));
    const std::string scale = scale_name(name);
    file_for(scale).read_block(scale, grid_row0, grid_rows, grid_col0, grid_cols, scales.data());
    for (int64_t r = 0; r < rows; ++r) {
      const float* scale_row = scales.data() + ((row0 + r) / block_rows - grid_row0) * grid_cols;
      float* row = out + r * cols;
      for (int64_t c = 0; c < cols;) {  // one run of columns per block
        const int64_t block = (col0 + c) / block_cols;
        const int64_t run_end = std::min(cols, (block + 1) * block_cols - col0);
        const float factor = scale_row[block - grid_col0];
        for (; c < run_end; ++c) row[c] *= factor;
      }
    }
  }

  // Every shard the index names holds exactly the tensors the index puts there. A tensor in a
  // shard but listed elsewhere or not at all (in two shards, say) is one transformers would
  // load from the shard, and this reader from where the index says (or not at all): a
  // different model. Reads every shard's header (bytes, not weights), each closed again.
  void check_shards_match_index(const std::string& index_path) const {
    std::map<std::string, std::string> listed;  // shard -> a tensor the index puts there (for messages)
    for (const auto& [name, file] : file_of_) listed.emplace(file, name);
    for (const auto& [shard, example] : listed) {
      std::error_code missing;
      if (!fs::exists(shard, missing))
        throw UserError(index_path + " puts " + example + " in " + shard + ", which does not exist");
    }
    for (const auto& [shard, example] : listed) {
      const io::SafetensorsFile header(shard);
      for (const auto& [name, info] : header.tensors()) {
        const auto it = file_of_.find(name);
        if (it == file_of_.end())
          throw UserError(shard + " holds tensor " + name + ", which " + index_path +
                          " does not list: the index does not describe these shards");
        if (it->second != shard)
          throw UserError(shard + " holds tensor " + name + ", which " + index_path + " puts in " + it->second +
                          " (a tensor in two shards, or a stale index)");
      }
    }
  }

  const io::SafetensorsFile& open(const std::string& path) const {
    auto it = files_.find(path);
    if (it == files_.end()) it = files_.emplace(path, std::make_unique<io::SafetensorsFile>(path)).first;
    return *it->second;
  }
  const io::SafetensorsFile& file_for(const std::string& name) const {
    auto it = file_of_.find(name);
    if (it == file_of_.end()) throw UserError(directory_ + ": tensor " + name + " is missing");
    return open(it->second);
  }
  const io::TensorInfo& info(const std::string& name) const { return file_for(name).info(name); }

  std::string directory_;
  std::string index_path_;  // a sharded checkpoint's index ("" for one model.safetensors)
  Quantization quantization_;
  std::map<std::string, std::string> file_of_;
  mutable std::map<std::string, std::unique_ptr<io::SafetensorsFile>> files_;
};

}  // namespace

std::unique_ptr<TensorSource> open_checkpoint(const std::string& directory, const Quantization& quantization) {
  return std::make_unique<CheckpointSource>(directory, quantization);
}

}  // namespace pf::model
