// The KV store on disk (see kv_store.hpp).
#include "kvcache/kv_store.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "io/fnv1a.hpp"

namespace pf::kv {

namespace fs = std::filesystem;

namespace {

std::string entry_name(const std::string& layout_key, uint64_t tokens_hash, int64_t tokens) {
  return layout_key + "-" + tokens_hash_text(tokens_hash) + "-" + std::to_string(tokens);
}

// Writes `bytes` to `path` and makes them durable.
void write_durably(const std::string& path, const void* data, size_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  bool ok = fd >= 0;
  for (size_t done = 0; ok && done < bytes;) {
    const ssize_t n = ::write(fd, static_cast<const char*>(data) + done, bytes - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    done += ok ? static_cast<size_t>(n) : 0;
  }
  const int error = errno;
  ok = ok && ::fdatasync(fd) == 0;
  if (fd >= 0) ::close(fd);
  if (!ok) throw std::runtime_error("cannot write " + path + ": " + std::strerror(error ? error : EIO));
}

}  // namespace

std::string store_layout_key(const std::string& model_identity, int pp, int tp, const std::string& partition) {
  return io::Fnv1a().add(model_identity).add_value(pp).add_value(tp).add(partition).hex();
}

std::vector<StoreEntry> list_store_entries(const std::string& dir, const std::string& layout_key, int* unreadable) {
  std::vector<StoreEntry> entries;
  int bad = 0;
  std::error_code error;
  for (const fs::directory_entry& item : fs::directory_iterator(dir, error)) {
    const std::string name = item.path().filename().string();
    if (name.rfind(layout_key + "-", 0) != 0 || !item.is_directory(error)) continue;
    try {
      StoreEntry entry;
      entry.dir = item.path().string();
      std::ifstream index_file(entry.dir + "/index.json");
      const nlohmann::json index = nlohmann::json::parse(index_file);
      const auto& prompts = index.at("prompts");
      if (prompts.size() != 1) throw std::runtime_error("not one prompt");
      entry.prompt = std::stoi(prompts.begin().key());
      entry.tokens = prompts.begin().value().at("tokens").get<int64_t>();
      std::ifstream ids_file(entry.dir + "/tokens.i32", std::ios::binary);
      entry.ids.resize(static_cast<size_t>(entry.tokens));
      ids_file.read(reinterpret_cast<char*>(entry.ids.data()), static_cast<std::streamsize>(entry.ids.size() * 4));
      if (!ids_file || ids_file.peek() != std::char_traits<char>::eof()) throw std::runtime_error("ids");
      entry.tokens_hash = io::Fnv1a().add(entry.ids.data(), entry.ids.size() * sizeof(int32_t)).value;
      if (tokens_hash_text(entry.tokens_hash) != prompts.begin().value().at("tokens_fnv1a").get<std::string>() ||
          name != entry_name(layout_key, entry.tokens_hash, entry.tokens))
        throw std::runtime_error("hash");
      entries.push_back(std::move(entry));
    } catch (const std::exception&) {
      ++bad;  // a foreign or damaged directory: never used
    }
  }
  if (unreadable) *unreadable = bad;
  return entries;
}

std::string store_file(const StoreEntry& entry, int stage, int tp_rank) {
  return entry.dir + "/" + kv_file_name(entry.prompt, stage, tp_rank);
}

void read_store_rows(const io::SafetensorsFile& file, const KvExportLayout& layout, int64_t pos0, int count,
                     float* keys, float* values) {
  const size_t d = static_cast<size_t>(layout.head_dim);
  for (int l = 0; l < layout.layers; ++l)
    for (int part = 0; part < 2; ++part) {
      const std::string name =
          "layers." + std::to_string(layout.layer_begin + l) + (part == 0 ? ".key" : ".value");
      float* out = (part == 0 ? keys : values) + static_cast<size_t>(l) * layout.kv_heads * count * d;
      // [kv_heads, tokens, head_dim] as rows of kv_heads: head h's rows pos0.. are contiguous.
      for (int h = 0; h < layout.kv_heads; ++h)
        file.read_block(name, h, 1, pos0 * static_cast<int64_t>(d), count * static_cast<int64_t>(d),
                        out + static_cast<size_t>(h) * count * d);
    }
}

std::string publish_store_entry(const std::string& dir, const std::string& incoming, const std::string& layout_key,
                                int prompt, const std::vector<int32_t>& ids, uint64_t tokens_hash,
                                const std::string& index_json) {
  const std::string name = entry_name(layout_key, tokens_hash, static_cast<int64_t>(ids.size()));
  const std::string staging = incoming + "/entry-" + std::to_string(prompt);
  const std::string files = fs::path(kv_file_name(prompt, 0, 0)).parent_path().string();  // prompt-NNNNNN
  std::error_code error;
  fs::create_directories(staging, error);
  if (error) throw std::runtime_error("cannot create " + staging + ": " + error.message());
  fs::rename(incoming + "/" + files, staging + "/" + files, error);
  if (error) throw std::runtime_error("cannot move " + incoming + "/" + files + ": " + error.message());
  write_durably(staging + "/tokens.i32", ids.data(), ids.size() * sizeof(int32_t));
  write_durably(staging + "/index.json", index_json.data(), index_json.size());
  if (fs::exists(dir + "/" + name, error)) {  // another run published it first: keep theirs
    fs::remove_all(staging, error);
    return name;
  }
  // One rename makes the whole entry visible; if another run renamed theirs in between, the
  // target is a non-empty directory and the rename fails: theirs stays, ours goes.
  if (::rename(staging.c_str(), (dir + "/" + name).c_str()) != 0) {
    const int reason = errno;
    fs::remove_all(staging, error);
    if (reason != ENOTEMPTY && reason != EEXIST)
      throw std::runtime_error("cannot rename " + staging + " to " + dir + "/" + name + ": " + std::strerror(reason));
  }
  return name;
}

}  // namespace pf::kv
