// The inputs of scripts/gpu_check.sh's `pipefill run` rows, made in seconds.
//
//   pipefill_bench_inputs checkpoint PRESET DIR [THREADS]
//       The preset as a bf16 Hugging Face checkpoint (DIR/config.json, one DIR/model.safetensors)
//       holding seeded uniform values in the synthetic presets' ranges (projections +-sqrt(3 /
//       fan_in), embeddings +-1, norm gains 1 +- 0.1, biases +-0.1), generated and written on
//       THREADS cores (default: all). Why not `make-model` or `--model synthetic:llama3-8b`: both
//       compute each value through the synthetic source's per-name hash, about 90 ns a value on
//       one core, 12 minutes for Llama-3-8B's 8.0B values; this takes seconds. The values are
//       not synthetic:PRESET's (no run compares them with anything; they only have to be finite
//       and of the right scale, so that the timed runs do the work real weights do).
//   pipefill_bench_inputs prompts FILE VOCAB LENGTH [LENGTH...]
//       One prompt of each length, in that order, tokens uniform in [0, VOCAB) from a fixed
//       seed, so files that start with the same length start with the same prompt.
//       (`make-prompts` draws the lengths at random.)
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "io/prompts_h5.hpp"
#include "io/safetensors.hpp"
#include "model/presets.hpp"
#include "model/splitmix64.hpp"
#include "model/tensor_source.hpp"

using namespace pf;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void pwrite_all(int fd, const void* data, size_t bytes, uint64_t offset, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error("write to " + path + " failed: " + std::strerror(errno) + " (disk full?)");
    p += n;
    bytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

// value = offset + scale * u, u uniform in [-1, 1): the ranges of model/synthetic_weights.cpp.
struct Range {
  float offset, scale;
};
Range range_of(const model::TensorSpec& spec) {
  if (ends_with(spec.name, "norm.weight")) return {1.0f, 0.1f};
  if (ends_with(spec.name, ".bias") || ends_with(spec.name, "e_score_correction_bias")) return {0.0f, 0.1f};
  if (spec.name == "model.embed_tokens.weight") return {0.0f, 1.0f};
  if (spec.shape.size() < 2) return {0.0f, 0.1f};
  return {0.0f, std::sqrt(3.0f / static_cast<float>(spec.shape[1]))};
}

int write_checkpoint(const std::string& preset, const std::string& dir, unsigned threads) {
  const auto t0 = std::chrono::steady_clock::now();
  const model::ModelConfig config = model::preset_config(preset);
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  nlohmann::json config_json = model::to_json(config);
  config_json["torch_dtype"] = "bfloat16";
  std::ofstream(fs::path(dir) / "config.json") << config_json.dump(2) << '\n';

  const std::vector<model::TensorSpec> specs = model::expected_tensors(config);
  std::vector<io::TensorSpec> layout;
  for (const auto& spec : specs) layout.push_back({spec.name, spec.shape});
  const io::SafetensorsHeader header = io::safetensors_header(layout, io::Dtype::kBF16, {{"format", "pt"}});
  const std::string path = (fs::path(dir) / "model.safetensors").string();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + path + ": " + std::strerror(errno));
  if (::ftruncate(fd, static_cast<off_t>(header.file_size)) != 0)
    throw std::runtime_error("cannot size " + path + ": " + std::strerror(errno));
  pwrite_all(fd, header.bytes.data(), header.bytes.size(), 0, path);

  // Pieces of at most 16M values (32 MiB), taken by the threads in turn.
  struct Piece {
    size_t tensor;
    int64_t begin, count;
  };
  constexpr int64_t kPiece = int64_t{1} << 24;
  std::vector<Piece> pieces;
  int64_t values = 0;
  for (size_t t = 0; t < specs.size(); ++t) {
    int64_t numel = 1;
    for (int64_t d : specs[t].shape) numel *= d;
    for (int64_t begin = 0; begin < numel; begin += kPiece)
      pieces.push_back({t, begin, std::min(kPiece, numel - begin)});
    values += numel;
  }
  std::atomic<size_t> next{0};
  std::mutex error_mutex;
  std::string error;
  auto work = [&] {
    std::vector<uint16_t> buffer(static_cast<size_t>(kPiece));
    try {
      for (size_t i = next++; i < pieces.size(); i = next++) {
        const Piece& piece = pieces[i];
        const model::TensorSpec& spec = specs[piece.tensor];
        const Range range = range_of(spec);
        const uint64_t base = model::splitmix64(0x5eedull * 1000003 + piece.tensor);
        for (int64_t k = 0; k < piece.count; ++k) {
          const uint64_t bits = model::splitmix64(base + static_cast<uint64_t>(piece.begin + k));
          const float u = static_cast<float>(bits >> 40) * (2.0f / 16777216.0f) - 1.0f;  // [-1, 1)
          buffer[static_cast<size_t>(k)] = io::float_to_bf16(range.offset + range.scale * u);
        }
        pwrite_all(fd, buffer.data(), static_cast<size_t>(piece.count) * 2,
                   header.data_begin.at(spec.name) + static_cast<uint64_t>(piece.begin) * 2, path);
      }
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (error.empty()) error = e.what();
      next = pieces.size();  // the others stop too
    }
  };
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < threads; ++i) pool.emplace_back(work);
  for (auto& thread : pool) thread.join();
  if (::close(fd) != 0 && error.empty()) error = "closing " + path + " failed: " + std::strerror(errno);
  if (!error.empty()) throw std::runtime_error(error);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s: preset %s, %.2fB values, bf16, %.1f GB in %.1f s on %u threads\n", dir.c_str(), preset.c_str(),
              static_cast<double>(values) / 1e9, static_cast<double>(header.file_size) / 1e9, seconds, threads);
  return 0;
}

int write_prompts(const std::string& path, int32_t vocab, const std::vector<int64_t>& lengths) {
  std::mt19937_64 rng(4242);
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  io::PromptSet prompts;
  prompts.offsets.push_back(0);
  for (const int64_t n : lengths) {
    for (int64_t i = 0; i < n; ++i) prompts.tokens.push_back(token(rng));
    prompts.offsets.push_back(static_cast<int64_t>(prompts.tokens.size()));
  }
  io::write_prompts(path, prompts);
  std::printf("wrote %s: %zu prompts, %zu tokens\n", path.c_str(), lengths.size(), prompts.tokens.size());
  return 0;
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s checkpoint PRESET DIR [THREADS]\n"
               "       %s prompts FILE VOCAB LENGTH [LENGTH...]\n",
               argv0, argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage(argv[0]);
  const std::string command = argv[1];
  try {
    if (command == "checkpoint" && (argc == 4 || argc == 5)) {
      const unsigned threads =
          argc == 5 ? static_cast<unsigned>(std::atoi(argv[4])) : std::max(1u, std::thread::hardware_concurrency());
      return write_checkpoint(argv[2], argv[3], std::max(1u, threads));
    }
    if (command == "prompts" && argc >= 5) {
      std::vector<int64_t> lengths;
      for (int i = 4; i < argc; ++i) lengths.push_back(std::atoll(argv[i]));
      const int32_t vocab = std::atoi(argv[3]);
      if (vocab < 1 || std::any_of(lengths.begin(), lengths.end(), [](int64_t n) { return n < 1; }))
        return usage(argv[0]);
      return write_prompts(argv[2], vocab, lengths);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return usage(argv[0]);
}
