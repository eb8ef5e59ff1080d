// A stored prompt's token rows (see entry_scores.hpp).
#include "kvcache/entry_scores.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "io/durable_file.hpp"
#include "io/fnv1a.hpp"
#include "io/positioned_io.hpp"

namespace pf::kv {

namespace {

std::string json_path(const std::string& dir) {
  return dir + "/scores.json";
}
std::string data_path(const std::string& dir) {
  return dir + "/scores.bin";
}

// Byte offsets of the four arrays in scores.bin.
struct Offsets {
  uint64_t logprobs = 0, topk_logprobs = 0, topk_ids = 0, set_logprobs = 0, end = 0;
};
Offsets offsets_of(int64_t tokens, const ScoresLayout& layout) {
  Offsets o;
  const uint64_t t = static_cast<uint64_t>(tokens), k = static_cast<uint64_t>(layout.top_k);
  o.topk_logprobs = layout.logprobs ? 4 * t : 0;
  o.topk_ids = o.topk_logprobs + 4 * t * k;
  o.set_logprobs = o.topk_ids + 4 * t * k;
  o.end = o.set_logprobs + 4 * t * layout.token_set.size();
  return o;
}

}  // namespace

// Written a block of rows at a time at each array's offset (memory O(block), whatever the
// prompt's length and the set's width), synced, then hashed as the reader will: in file order.
void write_entry_scores(const std::string& prompt_dir, int64_t tokens, const ScoresLayout& layout,
                        const ReadRows& read) {
  const Offsets o = offsets_of(tokens, layout);
  const std::string path = data_path(prompt_dir);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  bool ok = fd >= 0;
  const size_t k = static_cast<size_t>(layout.top_k), set = layout.token_set.size();
  const int64_t block = io::block_rows(layout.row_shape());
  io::TokenRowBuffer buffer;
  for (int64_t at = 0; ok && at < tokens; at += block) {
    const int count = static_cast<int>(std::min(block, tokens - at));
    const io::TokenRowsOut rows = buffer.resize(layout.row_shape(), count);
    read(at, count, rows);
    if (layout.logprobs) ok = io::write_at(fd, rows.logprobs, 4 * count, o.logprobs + 4 * at);
    if (ok && k)
      ok = io::write_at(fd, rows.topk_logprobs, 4 * count * k, o.topk_logprobs + 4 * at * k) &&
           io::write_at(fd, rows.topk_ids, 4 * count * k, o.topk_ids + 4 * at * k);
    if (ok && set) ok = io::write_at(fd, rows.set_logprobs, 4 * count * set, o.set_logprobs + 4 * at * set);
  }
  const int error = errno;
  ok = ok && ::fdatasync(fd) == 0;
  io::Fnv1a hash;
  std::vector<char> bytes(size_t{1} << 22);
  for (uint64_t at = 0; ok && at < o.end; at += bytes.size()) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(bytes.size(), o.end - at));
    ok = io::read_at(fd, bytes.data(), n, at);
    hash.add(bytes.data(), n);
  }
  if (fd >= 0) ::close(fd);
  if (!ok) throw std::runtime_error("cannot write " + path + ": " + std::strerror(error ? error : EIO));
  nlohmann::json about = {
      {"tokens", tokens}, {"logprobs", layout.logprobs}, {"top_k", layout.top_k}, {"fnv1a", hash.hex()}};
  if (set) about["token_set"] = layout.token_set;
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
  ScoresLayout layout{about["logprobs"].get<bool>(), about["top_k"].get<int>(), false, {}, {}};
  if (layout.top_k < 0 || layout.top_k > 1 << 20) return std::nullopt;
  if (about.contains("token_set")) {
    const nlohmann::json& set = about["token_set"];
    if (!set.is_array()) return std::nullopt;
    for (const nlohmann::json& id : set) {
      if (!id.is_number_integer()) return std::nullopt;
      layout.token_set.push_back(id.get<int32_t>());
    }
  }
  if (!verify) return layout;
  const Offsets o = offsets_of(tokens, layout);
  const int fd = ::open(data_path(prompt_dir).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  io::Fnv1a hash;
  std::vector<char> block(kScoresCheckBytes);
  bool whole = ::lseek(fd, 0, SEEK_END) == static_cast<off_t>(o.end);
  for (uint64_t at = 0; whole && at < o.end; at += block.size()) {
    const size_t bytes = static_cast<size_t>(std::min<uint64_t>(block.size(), o.end - at));
    whole = io::read_at(fd, block.data(), bytes, at);
    hash.add(block.data(), bytes);
    layout.block_fnv1a.push_back(io::Fnv1a().add(block.data(), bytes).value);
  }
  ::close(fd);
  if (!whole || hash.hex() != about["fnv1a"].get<std::string>()) return std::nullopt;
  return layout;
}

namespace {

// read_at, each piece of the file it reads held to the checksum the check found (`blocks`
// empty: unchecked). Reads whole pieces: a row's bytes are checked with their neighbours'.
bool read_checked(int fd, const std::vector<uint64_t>& blocks, uint64_t end, void* out, size_t size, uint64_t offset,
                  const std::string& path) {
  if (blocks.empty()) return io::read_at(fd, out, size, offset);
  if (size == 0) return true;
  if (offset + size > end) return false;  // (past the checked end: as read_at past the file's)
  std::vector<char> piece(kScoresCheckBytes);
  char* to = static_cast<char*>(out);
  for (uint64_t b = offset / kScoresCheckBytes; b * kScoresCheckBytes < offset + size; ++b) {
    if (b >= blocks.size()) return false;
    const uint64_t start = b * kScoresCheckBytes;
    if (start >= end) return false;
    const size_t bytes = static_cast<size_t>(std::min<uint64_t>(kScoresCheckBytes, end - start));  // the last is short
    if (!io::read_at(fd, piece.data(), bytes, start)) return false;
    if (io::Fnv1a().add(piece.data(), bytes).value != blocks[b])
      throw std::runtime_error(path + ": bytes " + std::to_string(start) + ".." + std::to_string(start + bytes) +
                               " changed after they were checked (written to by something else during this run)");
    const uint64_t from = std::max(offset, start), until = std::min(offset + size, start + bytes);
    std::memcpy(to + (from - offset), piece.data() + (from - start), until - from);
  }
  return true;
}

}  // namespace

void read_entry_scores(const std::string& prompt_dir, int64_t tokens, const ScoresLayout& stored, int64_t at, int count,
                       const io::TokenRowShape& wanted, const io::TokenRowsOut& rows) {
  const Offsets o = offsets_of(tokens, stored);
  const std::string path = data_path(prompt_dir);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct Closing {
    int fd;
    ~Closing() {
      if (fd >= 0) ::close(fd);
    }
  } closing{fd};  // (read_checked throws on a changed piece)
  bool ok = fd >= 0;
  auto read_at = [&](void* out, size_t size, uint64_t offset) {
    return read_checked(fd, stored.block_fnv1a, o.end, out, size, offset, path);
  };
  if (ok && rows.logprobs)
    ok = stored.logprobs && read_at(rows.logprobs, 4 * static_cast<size_t>(count), o.logprobs + 4 * at);
  const int top_k = wanted.top_k;
  if (ok && top_k > 0 && (rows.topk_logprobs || rows.topk_ids)) {
    // Each row's first top_k of the stored K (most likely first, ties to the smaller id: the
    // same rows a run asking for top_k computes).
    const size_t k = static_cast<size_t>(stored.top_k);
    std::vector<float> values(count * k);
    std::vector<int32_t> ids(count * k);
    ok = top_k <= stored.top_k && read_at(values.data(), 4 * values.size(), o.topk_logprobs + 4 * at * k) &&
         read_at(ids.data(), 4 * ids.size(), o.topk_ids + 4 * at * k);
    for (int r = 0; ok && r < count; ++r)
      for (int j = 0; j < top_k; ++j) {
        if (rows.topk_logprobs) rows.topk_logprobs[static_cast<size_t>(r) * top_k + j] = values[r * k + j];
        if (rows.topk_ids) rows.topk_ids[static_cast<size_t>(r) * top_k + j] = ids[r * k + j];
      }
  }
  if (ok && rows.set_logprobs) {  // the same set (ScoresLayout::serves): its rows as stored
    const size_t set = stored.token_set.size();
    ok = static_cast<int>(set) == wanted.set_size &&
         read_at(rows.set_logprobs, 4 * set * count, o.set_logprobs + 4 * at * set);
  }
  if (!ok) throw std::runtime_error("cannot read the token scores of " + prompt_dir);
}

namespace {

constexpr int64_t kHiddenBlockRows = 4096;  // rows per checksum of hidden_rows.bin

std::string hidden_json(const std::string& dir) {
  return dir + "/hidden_rows.json";
}
std::string hidden_data(const std::string& dir) {
  return dir + "/hidden_rows.bin";
}

nlohmann::json read_hidden_json(const std::string& dir, int64_t tokens, int64_t first, int hidden) {
  std::ifstream in(hidden_json(dir));
  if (!in) return nullptr;
  const nlohmann::json about = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  const int64_t blocks = (tokens - first + kHiddenBlockRows - 1) / kHiddenBlockRows;
  if (!about.is_object() || about.value("tokens", int64_t{-1}) != tokens ||
      about.value("first", int64_t{-1}) != first || about.value("hidden", -1) != hidden ||
      about.value("block_rows", int64_t{-1}) != kHiddenBlockRows || !about.contains("fnv1a") ||
      !about["fnv1a"].is_array() || static_cast<int64_t>(about["fnv1a"].size()) != blocks)
    return nullptr;
  return about;
}

}  // namespace

HiddenRowsWriter::HiddenRowsWriter(const std::string& prompt_dir, int64_t tokens, int64_t first, int hidden)
    : dir_(prompt_dir), tokens_(tokens), first_(first), next_(first), hidden_(hidden), block_hash_(io::Fnv1a().value) {
  std::error_code ignored;
  std::filesystem::create_directories(dir_, ignored);
  fd_ = ::open(hidden_data(dir_).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::runtime_error("cannot write " + hidden_data(dir_) + ": " + std::strerror(errno));
}

HiddenRowsWriter::~HiddenRowsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void HiddenRowsWriter::add(int64_t start, int count, const float* rows) {
  if (start != next_) throw std::logic_error("hidden rows out of order");
  const size_t row_bytes = sizeof(float) * static_cast<size_t>(hidden_);
  const char* bytes = reinterpret_cast<const char*>(rows);
  if (!io::write_at(fd_, bytes, row_bytes * count, static_cast<uint64_t>(start - first_) * row_bytes))
    throw std::runtime_error("cannot write " + hidden_data(dir_) + ": " + std::strerror(errno));
  for (int r = 0; r < count; ++r) {  // the block checksums, in row order
    io::Fnv1a hash;
    hash.value = block_hash_;
    block_hash_ = hash.add(bytes + r * row_bytes, row_bytes).value;
    if ((start - first_ + r + 1) % kHiddenBlockRows == 0 || start + r + 1 == tokens_) {
      io::Fnv1a done;
      done.value = block_hash_;
      block_hashes_.push_back(done.hex());
      block_hash_ = io::Fnv1a().value;
    }
  }
  next_ = start + count;
  if (next_ < tokens_) return;
  const bool synced = ::fdatasync(fd_) == 0;
  ::close(fd_);
  fd_ = -1;
  if (!synced) throw std::runtime_error("cannot write " + hidden_data(dir_) + ": " + std::strerror(errno));
  const nlohmann::json about = {{"tokens", tokens_},
                                {"first", first_},
                                {"hidden", hidden_},
                                {"block_rows", kHiddenBlockRows},
                                {"fnv1a", block_hashes_}};
  const std::string text = about.dump() + "\n";
  io::write_durably(hidden_json(dir_), text.data(), text.size());
}

bool entry_hidden_rows(const std::string& prompt_dir, int64_t tokens, int64_t first, int hidden) {
  return !read_hidden_json(prompt_dir, tokens, first, hidden).is_null();
}

std::vector<double> sum_entry_hidden_rows(const std::vector<HiddenRowsPart>& chain, int hidden, int64_t c) {
  std::vector<double> sum(static_cast<size_t>(hidden), 0.0);
  std::vector<float> block;
  const size_t row_floats = static_cast<size_t>(hidden);
  for (size_t part = 0; part < chain.size(); ++part) {
    const HiddenRowsPart& at = chain[part];
    const int64_t end = std::min(c, part + 1 < chain.size() ? chain[part + 1].first : at.tokens);
    if (end <= at.first) continue;
    const std::string dir = at.prompt_dir;
    const nlohmann::json about = read_hidden_json(dir, at.tokens, at.first, hidden);
    if (about.is_null()) throw std::runtime_error(hidden_json(dir) + " is missing or does not describe its rows");
    const int fd = ::open(hidden_data(dir).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error("cannot read " + hidden_data(dir) + ": " + std::strerror(errno));
    for (int64_t b = 0; at.first + b * kHiddenBlockRows < end; ++b) {
      const int64_t first = at.first + b * kHiddenBlockRows, rows = std::min(kHiddenBlockRows, at.tokens - first);
      block.resize(rows * row_floats);
      const bool read =
          io::read_at(fd, block.data(), block.size() * sizeof(float), (first - at.first) * row_floats * sizeof(float));
      if (!read || io::Fnv1a().add(block.data(), block.size() * sizeof(float)).hex() != about["fnv1a"][b]) {
        ::close(fd);
        throw std::runtime_error(hidden_data(dir) + ": rows " + std::to_string(first) + ".." +
                                 std::to_string(first + rows) + " are missing or do not match their checksum");
      }
      // Row by row, as the last stage's running sum takes them (pipeline/hidden_state_rows.cpp).
      for (int64_t r = 0; r < rows && first + r < end; ++r)
        for (size_t k = 0; k < row_floats; ++k) sum[k] += block[r * row_floats + k];
    }
    ::close(fd);
  }
  return sum;
}

}  // namespace pf::kv
