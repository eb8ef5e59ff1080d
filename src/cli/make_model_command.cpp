// `pipefill make-model`: a seeded random model in Hugging Face layout. Tensors are
// generated one shard at a time, so even llama3-8b needs only one shard in memory.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "errors.hpp"
#include "io/safetensors.hpp"
#include "model/presets.hpp"
#include "model/tensor_source.hpp"

namespace pf::cli {

int make_model_command(int argc, char** argv) {
  MakeModelOptions options;
  if (!parse_make_model(argc, argv, options)) return 0;
  const model::ModelConfig config = model::preset_config(options.preset);
  const io::Dtype dtype = options.dtype == "bf16" ? io::Dtype::kBF16 : io::Dtype::kF32;
  namespace fs = std::filesystem;
  std::error_code error;
  fs::create_directories(options.out, error);
  if (error) throw UserError("cannot create " + options.out + ": " + error.message());
  // A model made here before may have had other shards: its weight files go first, so that
  // the directory holds this model's alone (an old index beside a new model.safetensors was
  // read as the old model). Other files in the directory are left as they are.
  const std::regex weight_file(R"(model(-\d{5}-of-\d{5})?\.safetensors|model\.safetensors\.index\.json)");
  for (const auto& entry : fs::directory_iterator(options.out, error))
    if (entry.is_regular_file() && std::regex_match(entry.path().filename().string(), weight_file))
      fs::remove(entry.path(), error);

  nlohmann::json config_json = model::to_json(config);
  config_json["torch_dtype"] = dtype == io::Dtype::kBF16 ? "bfloat16" : "float32";
  std::ofstream(fs::path(options.out) / "config.json") << config_json.dump(2) << '\n';

  // Group tensors into shards of at most max_shard_mb (a tensor larger than that gets its own).
  const auto specs = model::expected_tensors(config);
  const int64_t limit = options.max_shard_mb << 20;
  std::vector<std::vector<model::TensorSpec>> shards(1);
  int64_t shard_bytes = 0;
  for (const auto& spec : specs) {
    int64_t bytes = io::dtype_size(dtype);
    for (int64_t dim : spec.shape) bytes *= dim;
    if (shard_bytes > 0 && shard_bytes + bytes > limit) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(spec);
    shard_bytes += bytes;
  }

  const auto source = model::make_synthetic_source(config, options.seed);
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    const std::string file = shards.size() == 1 ? "model.safetensors" : name;
    std::vector<std::vector<float>> data;
    std::vector<io::TensorToWrite> tensors;
    for (const auto& spec : shards[s]) {
      const int64_t rows = spec.shape[0], cols = spec.shape.size() > 1 ? spec.shape[1] : 1;
      data.emplace_back(static_cast<size_t>(rows * cols));
      source->read_block(spec.name, 0, rows, 0, cols, data.back().data());
      weight_map[spec.name] = file;
    }
    for (size_t t = 0; t < shards[s].size(); ++t)
      tensors.push_back({shards[s][t].name, shards[s][t].shape, data[t].data()});
    io::write_safetensors((fs::path(options.out) / file).string(), tensors, dtype);
  }
  if (shards.size() > 1)
    std::ofstream(fs::path(options.out) / "model.safetensors.index.json")
        << nlohmann::json{{"metadata", {{"total_parameters", config.total_parameters()}}}, {"weight_map", weight_map}}
               .dump(2)
        << '\n';
  std::printf("wrote %s: preset %s, %.1fM parameters, %s, %zu file(s)\n", options.out.c_str(), options.preset.c_str(),
              config.total_parameters() / 1e6, options.dtype.c_str(), shards.size());
  return 0;
}

}  // namespace pf::cli
