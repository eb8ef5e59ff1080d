// The checkpoint-directory tensor source: config.json's neighbours model.safetensors or the
// shards model.safetensors.index.json lists, opened lazily so a rank touches only its own.
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "errors.hpp"
#include "io/file_checks.hpp"
#include "io/safetensors.hpp"
#include "model/tensor_source.hpp"

namespace pf::model {
namespace fs = std::filesystem;
namespace {

class CheckpointSource final : public TensorSource {
 public:
  explicit CheckpointSource(const std::string& directory) : directory_(directory) {
    const fs::path index_path = fs::path(directory) / "model.safetensors.index.json";
    const fs::path single_path = fs::path(directory) / "model.safetensors";
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
    } else if (fs::exists(single_path)) {
      auto& file = open(single_path.string());
      for (auto& [name, info] : file.tensors()) file_of_[name] = single_path.string();
    } else {
      throw UserError("no weights in " + directory + " (expected model.safetensors or model.safetensors.index.json)");
    }
  }

  bool has(const std::string& name) const override { return file_of_.count(name) != 0; }
  std::vector<int64_t> shape(const std::string& name) const override { return info(name).shape; }
  void read_block(const std::string& name, int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                  float* out) const override {
    file_for(name).read_block(name, row0, rows, col0, cols, out);
  }
  uint64_t fingerprint(const std::string& name) const override { return file_for(name).content_fingerprint(name); }

 private:
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
  std::map<std::string, std::string> file_of_;
  mutable std::map<std::string, std::unique_ptr<io::SafetensorsFile>> files_;
};

}  // namespace

std::unique_ptr<TensorSource> open_checkpoint(const std::string& directory) {
  return std::make_unique<CheckpointSource>(directory);
}

}  // namespace pf::model
