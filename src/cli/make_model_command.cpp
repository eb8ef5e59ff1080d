// `pipefill make-model`: a seeded random model in Hugging Face layout. Tensors are
// generated one shard at a time, so even llama3-8b needs only one shard in memory.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

namespace {

namespace fs = std::filesystem;

constexpr const char* kStagingPrefix = ".make-model-";

// The names make-model writes: a directory holding only these is one of its own.
bool made_here(const std::string& name) {
  static const std::regex kOwn(R"(config\.json|model(-\d{5}-of-\d{5})?\.safetensors|model\.safetensors\.index\.json)");
  return std::regex_match(name, kOwn);
}
bool staging_left(const std::string& name) {  // by a make-model that was killed
  return name.rfind(kStagingPrefix, 0) == 0;
}

// --out absent, an empty directory, or (with --overwrite) a directory of make-model's own
// files: anything else may be someone's checkpoint (its tokenizer, its weights) and is refused.
// True when --out already holds a model.
bool check_out(const MakeModelOptions& options) {
  std::error_code error;
  if (!fs::exists(options.out, error)) return false;
  if (!fs::is_directory(options.out, error)) throw UserError("--out " + options.out + " exists and is not a directory");
  std::string held, foreign;
  for (const auto& entry : fs::directory_iterator(options.out, error)) {
    const std::string name = entry.path().filename().string();
    if (staging_left(name)) continue;
    (made_here(name) && entry.is_regular_file() ? held : foreign) = name;
  }
  if (error) throw UserError("cannot read --out " + options.out + ": " + error.message());
  if (!foreign.empty())
    throw UserError("--out " + options.out + " holds " + foreign +
                    ", which make-model does not write: give a new or empty directory (this one may be a real "
                    "checkpoint)");
  if (!held.empty() && !options.overwrite)
    throw UserError("--out " + options.out + " already holds a model (" + held +
                    "); give --overwrite to replace it, or another --out");
  return !held.empty();
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) throw UserError("cannot write " + path.string());
}

// Inside --out (the same file system whatever --out is: a link, ".", a mount point), removed
// unless its files were moved out.
struct Staging {
  fs::path dir;
  ~Staging() {
    std::error_code error;
    if (!dir.empty()) fs::remove_all(dir, error);
  }
};

}  // namespace

int make_model_command(int argc, char** argv) {
  MakeModelOptions options;
  if (!parse_make_model(argc, argv, options)) return 0;
  const model::ModelConfig config = model::preset_config(options.preset);
  const io::Dtype dtype = options.dtype == "bf16" ? io::Dtype::kBF16 : io::Dtype::kF32;
  const bool replacing = check_out(options);
  // Every file is written whole into a directory of its own inside --out first: a failed write
  // (a full disk) leaves --out as it was, and a model made before never mixes with this one.
  // Only renames follow, which need no space.
  const fs::path out(options.out);
  std::error_code error;
  struct Made {  // --out, when this run made it: removed again (if still empty) unless it succeeds
    fs::path dir;
    ~Made() {
      std::error_code ignored;
      if (!dir.empty()) fs::remove(dir, ignored);
    }
  } made{fs::exists(fs::symlink_status(out, error)) ? fs::path() : out};  // (a dangling link is not ours)
  fs::create_directories(out, error);
  if (error) throw UserError("cannot create " + options.out + ": " + error.message());
  for (const auto& entry : fs::directory_iterator(out, error))  // a killed make-model's leftovers
    if (staging_left(entry.path().filename().string())) fs::remove_all(entry.path(), error);
  std::string pattern = (out / (std::string(kStagingPrefix) + "XXXXXX")).string();
  if (!::mkdtemp(pattern.data())) throw UserError("cannot write into " + options.out + ": " + std::strerror(errno));
  Staging staging{pattern};

  nlohmann::json config_json = model::to_json(config);
  config_json["torch_dtype"] = dtype == io::Dtype::kBF16 ? "bfloat16" : "float32";
  write_text(staging.dir / "config.json", config_json.dump(2) + "\n");

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
    io::write_safetensors((staging.dir / file).string(), tensors, dtype);
  }
  if (shards.size() > 1)
    write_text(
        staging.dir / "model.safetensors.index.json",
        nlohmann::json{{"metadata", {{"total_parameters", config.total_parameters()}}}, {"weight_map", weight_map}}
                .dump(2) +
            "\n");

  // The old model's files (checked above to be make-model's own) out, the new ones in.
  if (replacing)
    for (const auto& entry : fs::directory_iterator(out, error))
      if (made_here(entry.path().filename().string())) fs::remove(entry.path(), error);
  for (const auto& entry : fs::directory_iterator(staging.dir, error)) {
    fs::rename(entry.path(), out / entry.path().filename(), error);
    if (error)
      throw UserError("cannot move " + entry.path().string() + " into " + options.out + ": " + error.message());
  }
  made.dir.clear();
  std::printf("wrote %s: preset %s, %.1fM parameters, %s, %zu file(s)\n", options.out.c_str(), options.preset.c_str(),
              config.total_parameters() / 1e6, options.dtype.c_str(), shards.size());
  return 0;
}

}  // namespace pf::cli
