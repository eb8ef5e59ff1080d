// A stored prompt's token rows (see entry_scores.hpp).
#include "kvcache/entry_scores.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "io/durable_file.hpp"
#include "io/fnv1a.hpp"

namespace pf::kv {

namespace {

constexpr int64_t kBlockRows = 65536;

std::string json_path(const std::string& dir) {
  return dir + "/scores.json";
}
std::string data_path(const std::string& dir) {
  return dir + "/scores.bin";
}

// Byte offsets of the three arrays in scores.bin.
struct Offsets {
  uint64_t logprobs = 0, topk_logprobs = 0, topk_ids = 0, end = 0;
};
Offsets offsets_of(int64_t tokens, ScoresLayout layout) {
  Offsets o;
  const uint64_t t = static_cast<uint64_t>(tokens), k = static_cast<uint64_t>(layout.top_k);
  o.topk_logprobs = layout.logprobs ? 4 * t : 0;
  o.topk_ids = o.topk_logprobs + 4 * t * k;
  o.end = o.topk_ids + 4 * t * k;
  return o;
}

bool read_at(int fd, void* out, size_t bytes, uint64_t offset) {
  auto* p = static_cast<char*>(out);
  while (bytes > 0) {
    const ssize_t got = ::pread(fd, p, bytes, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    bytes -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return true;
}

}  // namespace

void write_entry_scores(const std::string& prompt_dir, int64_t tokens, ScoresLayout layout, const ReadRows& read) {
  const Offsets o = offsets_of(tokens, layout);
  std::vector<char> data(o.end);
  const size_t k = static_cast<size_t>(layout.top_k);
  std::vector<float> logprobs, topk_logprobs;
  std::vector<int32_t> topk_ids;
  for (int64_t at = 0; at < tokens; at += kBlockRows) {
    const int count = static_cast<int>(std::min(kBlockRows, tokens - at));
    logprobs.resize(count);
    topk_logprobs.resize(count * k);
    topk_ids.resize(count * k);
    read(at, count, layout.logprobs ? logprobs.data() : nullptr, k ? topk_logprobs.data() : nullptr,
         k ? topk_ids.data() : nullptr);
    if (layout.logprobs) std::memcpy(data.data() + o.logprobs + 4 * at, logprobs.data(), 4 * count);
    if (k) {
      std::memcpy(data.data() + o.topk_logprobs + 4 * at * k, topk_logprobs.data(), 4 * count * k);
      std::memcpy(data.data() + o.topk_ids + 4 * at * k, topk_ids.data(), 4 * count * k);
    }
  }
  io::write_durably(data_path(prompt_dir), data.data(), data.size());
  const nlohmann::json about = {{"tokens", tokens},
                                {"logprobs", layout.logprobs},
                                {"top_k", layout.top_k},
                                {"fnv1a", io::Fnv1a().add(data.data(), data.size()).hex()}};
  const std::string text = about.dump() + "\n";
  io::write_durably(json_path(prompt_dir), text.data(), text.size());
}

std::optional<ScoresLayout> entry_scores(const std::string& prompt_dir, int64_t tokens, bool verify) {
  std::ifstream in(json_path(prompt_dir));
  if (!in) return std::nullopt;
  const nlohmann::json about = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!about.is_object() || about.value("tokens", int64_t{-1}) != tokens || !about.contains("logprobs") ||
      !about["logprobs"].is_boolean() || !about.contains("top_k") || !about["top_k"].is_number_integer() ||
      !about.contains("fnv1a") || !about["fnv1a"].is_string())
    return std::nullopt;
  ScoresLayout layout{about["logprobs"].get<bool>(), about["top_k"].get<int>()};
  if (layout.top_k < 0 || layout.top_k > 1 << 20) return std::nullopt;
  if (!verify) return layout;
  const Offsets o = offsets_of(tokens, layout);
  const int fd = ::open(data_path(prompt_dir).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  io::Fnv1a hash;
  std::vector<char> block(size_t{1} << 22);
  bool whole = ::lseek(fd, 0, SEEK_END) == static_cast<off_t>(o.end);
  for (uint64_t at = 0; whole && at < o.end; at += block.size()) {
    const size_t bytes = static_cast<size_t>(std::min<uint64_t>(block.size(), o.end - at));
    whole = read_at(fd, block.data(), bytes, at);
    hash.add(block.data(), bytes);
  }
  ::close(fd);
  if (!whole || hash.hex() != about["fnv1a"].get<std::string>()) return std::nullopt;
  return layout;
}

void read_entry_scores(const std::string& prompt_dir, int64_t tokens, ScoresLayout stored, int64_t at, int count,
                       int top_k, float* logprobs, float* topk_logprobs, int32_t* topk_ids) {
  const Offsets o = offsets_of(tokens, stored);
  const int fd = ::open(data_path(prompt_dir).c_str(), O_RDONLY | O_CLOEXEC);
  bool ok = fd >= 0;
  if (ok && logprobs)
    ok = stored.logprobs && read_at(fd, logprobs, 4 * static_cast<size_t>(count), o.logprobs + 4 * at);
  if (ok && top_k > 0 && (topk_logprobs || topk_ids)) {
    // Each row's first top_k of the stored K (most likely first, ties to the smaller id: the
    // same rows a run asking for top_k computes).
    const size_t k = static_cast<size_t>(stored.top_k);
    std::vector<float> values(count * k);
    std::vector<int32_t> ids(count * k);
    ok = top_k <= stored.top_k && read_at(fd, values.data(), 4 * values.size(), o.topk_logprobs + 4 * at * k) &&
         read_at(fd, ids.data(), 4 * ids.size(), o.topk_ids + 4 * at * k);
    for (int r = 0; ok && r < count; ++r)
      for (int j = 0; j < top_k; ++j) {
        if (topk_logprobs) topk_logprobs[static_cast<size_t>(r) * top_k + j] = values[r * k + j];
        if (topk_ids) topk_ids[static_cast<size_t>(r) * top_k + j] = ids[r * k + j];
      }
  }
  if (fd >= 0) ::close(fd);
  if (!ok) throw std::runtime_error("cannot read the token scores of " + prompt_dir);
}

}  // namespace pf::kv
