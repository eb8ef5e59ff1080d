// KV export: the writer thread and the file layout (see kv_export.hpp).
#include "kvcache/kv_export.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "io/durable_file.hpp"
#include "io/fnv1a.hpp"
#include "io/positioned_io.hpp"
#include "kvcache/kv_checksum.hpp"

namespace pf::kv {

namespace fs = std::filesystem;

namespace {

// Bytes of chunks copied out and waiting for the disk before the compute waits (at least one
// chunk is always accepted): with SmolLM2's 15-layer stages a 512-token chunk is 11.8 MB.
constexpr size_t kMaxQueuedBytes = size_t{512} << 20;

std::string padded(int value, int width) {
  std::string text = std::to_string(value);
  return std::string(text.size() < static_cast<size_t>(width) ? width - text.size() : 0, '0') + text;
}

std::vector<io::TensorSpec> tensor_specs(const KvExportLayout& layout, int64_t tokens) {
  std::vector<io::TensorSpec> specs;
  const std::vector<int64_t> shape = {layout.kv_heads, tokens, layout.head_dim};
  for (int l = 0; l < layout.layers; ++l)
    for (const std::string& name : kv_tensor_names(layout.layer_begin + l, layout.latent))
      specs.push_back({name, shape});
  return specs;
}

}  // namespace

std::string kv_prompt_dir_name(int prompt) {
  return "prompt-" + padded(prompt, 6);
}

std::string kv_file_name(int prompt, int stage, int tp_rank) {
  return kv_prompt_dir_name(prompt) + "/stage" + padded(stage, 2) + "_tp" + padded(tp_rank, 2) + ".safetensors";
}

std::vector<std::string> kv_tensor_names(int layer, bool latent) {
  const std::string prefix = "layers." + std::to_string(layer);
  if (latent) return {prefix + ".latent"};
  return {prefix + ".key", prefix + ".value"};
}

std::vector<std::string> kv_export_file_patterns() {
  return {"prompt-[0-9]*/stage[0-9]*_tp[0-9]*.safetensors", "index.json"};
}

std::string tokens_hash_text(uint64_t tokens_hash) {
  io::Fnv1a hash;
  hash.value = tokens_hash;
  return hash.hex();
}

std::map<std::string, std::string> kv_file_metadata(const KvExportLayout& layout, int prompt, int64_t tokens,
                                                    uint64_t tokens_hash, int64_t first_position) {
  const auto range = [](int begin, int count) { return std::to_string(begin) + "," + std::to_string(begin + count); };
  std::map<std::string, std::string> metadata = {
      {"format", kKvExportFormat},
      {"model_identity", layout.model_identity},
      {"dtype", io::dtype_name(layout.dtype)},
      {"prompt", std::to_string(prompt)},
      {"tokens", std::to_string(tokens)},
      {"tokens_fnv1a", tokens_hash_text(tokens_hash)},
      {"first_position", std::to_string(first_position)},
      {"layers", range(layout.layer_begin, layout.layers)},
      {"total_layers", std::to_string(layout.total_layers)},
      {"kv_heads", range(layout.kv_head_begin, layout.kv_heads)},
      {"total_kv_heads", std::to_string(layout.total_kv_heads)},
      {"head_dim", std::to_string(layout.head_dim)},
      {"stage", std::to_string(layout.stage)},
      {"tp_rank", std::to_string(layout.tp_rank)},
      {"key", "after RoPE (and q/k norm), as Hugging Face caches it; [kv_heads, tokens, head_dim]"},
      {"data_checksum", kUnsetChecksum}};
  if (!layout.latent) return metadata;
  // (Dense files keep the keys they always had: exports and stores written before stay valid.)
  metadata.erase("key");
  metadata["cache"] = "latent";
  metadata["kv_lora_rank"] = std::to_string(layout.kv_lora_rank);
  metadata["latent"] =
      "per token: the normed compressed KV (kv_lora_rank values), then the shared key after RoPE; [1, tokens, "
      "head_dim]; the same rows on every TP rank";
  return metadata;
}

namespace {

// kv_file_problem and kv_rows_problem: the metadata and tensors checked, then the terms of
// positions [0, rows) summed (rows -1: every position) and compared with `checksum` (nullopt:
// the file's own data_checksum).
std::optional<std::string> file_problem(const std::string& path, std::map<std::string, std::string> expected,
                                        int64_t rows, std::optional<uint64_t> checksum,
                                        std::vector<uint64_t>* position_sums, const RowsCounted* counted) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) return "missing";
  try {
    const io::SafetensorsFile file(path);  // a torn or truncated file fails its header checks
    std::map<std::string, std::string> metadata = file.metadata();
    const std::string stored = metadata.count("data_checksum") ? metadata["data_checksum"] : "";
    metadata.erase("data_checksum");
    expected.erase("data_checksum");
    for (const auto& [key, value] : expected)
      if (metadata.count(key) == 0 || metadata[key] != value)
        return "its " + key + " is \"" + (metadata.count(key) ? metadata[key] : "") + "\", not \"" + value + "\"";
    // The tensors the metadata promise: key and value of each layer, [kv_heads, tokens, head_dim].
    const auto range = [&](const std::string& key) {
      const std::string& text = expected.at(key);
      const size_t comma = text.find(',');
      return std::make_pair(std::stoi(text.substr(0, comma)), std::stoi(text.substr(comma + 1)));
    };
    const auto [layer_begin, layer_end] = range("layers");
    const auto [head_begin, head_end] = range("kv_heads");
    const int64_t tokens = std::stoll(expected.at("tokens"));
    // A stored prompt that shares a stored prefix holds rows [first, tokens) only (kv_store.hpp).
    const int64_t first = expected.count("first_position") ? std::stoll(expected.at("first_position")) : 0;
    if (rows < 0) rows = tokens;
    if (rows > tokens) return "it holds " + std::to_string(tokens) + " positions, not " + std::to_string(rows);
    const std::vector<int64_t> shape = {head_end - head_begin, tokens - first, std::stoll(expected.at("head_dim"))};
    const bool latent = expected.count("cache") && expected.at("cache") == "latent";
    if (file.tensors().size() != static_cast<size_t>((latent ? 1 : 2) * (layer_end - layer_begin)))
      return "it does not hold the tensors it should";
    for (int l = layer_begin; l < layer_end; ++l)
      for (const std::string& name : kv_tensor_names(l, latent)) {
        if (file.tensors().count(name) == 0) return "tensor " + name + " is missing";
        const io::TensorInfo& info = file.info(name);
        if (info.shape != shape || io::dtype_name(info.dtype) != expected.at("dtype"))
          return "tensor " + name + " does not have the shape and dtype its metadata say";
      }
    // Every row hashed again, in blocks of whole rows.
    uint64_t sum = 0;
    if (position_sums) position_sums->assign(static_cast<size_t>(rows), 0);
    rows -= first;  // the file's own rows, position first + i at index i
    std::vector<char> block;
    for (const auto& [name, info] : file.tensors()) {
      const uint64_t row_bytes = static_cast<uint64_t>(info.shape[2]) * io::dtype_size(info.dtype);
      const uint64_t tensor_name = name_hash(name);
      constexpr int64_t kRows = 4096;
      for (int64_t head = 0; head < info.shape[0]; ++head) {
        const bool summed = position_sums && (!counted || counted->count({name, static_cast<int>(head)}) > 0);
        for (int64_t at = 0; at < rows; at += kRows) {
          const int64_t count = std::min(kRows, rows - at);
          block.resize(static_cast<size_t>(count * row_bytes));
          file.read_bytes(name, (static_cast<uint64_t>(head) * info.shape[1] + at) * row_bytes, block.size(),
                          block.data());
          for (int64_t r = 0; r < count; ++r) {
            const uint64_t term = checksum_term(tensor_name, static_cast<int>(head), first + at + r,
                                                row_hash(block.data() + r * row_bytes, row_bytes));
            sum += term;
            if (summed) (*position_sums)[static_cast<size_t>(first + at + r)] += term;
          }
        }
      }
    }
    io::Fnv1a text;
    text.value = sum;
    if (checksum ? sum != *checksum : stored != text.hex())
      return "its data do not match their checksum (a damaged file)";
    return std::nullopt;
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace

std::optional<std::string> kv_file_problem(const std::string& path, std::map<std::string, std::string> expected,
                                           std::vector<uint64_t>* position_sums, const RowsCounted* counted) {
  return file_problem(path, std::move(expected), -1, std::nullopt, position_sums, counted);
}

std::optional<std::string> kv_rows_problem(const std::string& path, std::map<std::string, std::string> expected,
                                           int64_t rows, uint64_t checksum, std::vector<uint64_t>* position_sums,
                                           const RowsCounted* counted) {
  return file_problem(path, std::move(expected), rows, checksum, position_sums, counted);
}

bool kv_file_complete(const KvExportLayout& layout, int prompt, int64_t tokens, uint64_t tokens_hash) {
  return !kv_file_problem(layout.dir + "/" + kv_file_name(prompt, layout.stage, layout.tp_rank),
                          kv_file_metadata(layout, prompt, tokens, tokens_hash));
}

KvExporter::KvExporter(KvExportLayout layout, std::vector<int64_t> lengths, std::vector<uint64_t> token_hashes,
                       KvFileMode mode, std::vector<int64_t> first_positions)
    : layout_(std::move(layout)),
      mode_(mode),
      lengths_(std::move(lengths)),
      hashes_(std::move(token_hashes)),
      firsts_(std::move(first_positions)) {
  firsts_.resize(lengths_.size(), 0);
  writer_ = std::thread([this] { run(); });
}

KvExporter::~KvExporter() {
  finish();
}

void KvExporter::add_chunk(int prompt, int64_t pos0, int count, std::vector<float> keys, std::vector<float> values,
                           bool last) {
  const size_t bytes = sizeof(float) * (keys.size() + values.size());
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return queue_.empty() || queued_bytes_ + bytes <= kMaxQueuedBytes; });
  queued_bytes_ += bytes;
  Chunk chunk;
  chunk.prompt = prompt;
  chunk.pos0 = pos0;
  chunk.count = count;
  chunk.keys = std::move(keys);
  chunk.values = std::move(values);
  chunk.last = last;
  queue_.push_back(std::move(chunk));
  changed_.notify_all();
}

void KvExporter::continue_file(int prompt, int64_t rows, uint64_t checksum) {
  if (mode_ != KvFileMode::kCheckpoint) throw std::logic_error("continue_file: only a checkpoint's files continue");
  Chunk op;
  op.op = Chunk::Op::kContinue;
  op.prompt = prompt;
  op.pos0 = rows;
  op.ticket = checksum;
  std::lock_guard<std::mutex> lock(mutex_);
  queue_.push_back(std::move(op));
  changed_.notify_all();
}

uint64_t KvExporter::request_sync() {
  Chunk op;
  op.op = Chunk::Op::kSync;
  std::lock_guard<std::mutex> lock(mutex_);
  op.ticket = ++tickets_;
  const uint64_t ticket = op.ticket;
  queue_.push_back(std::move(op));
  changed_.notify_all();
  return ticket;
}

std::optional<KvSyncResult> KvExporter::sync_result(uint64_t ticket, bool wait) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (wait) changed_.wait(lock, [&] { return synced_.count(ticket) > 0 || !writer_.joinable(); });
  auto found = synced_.find(ticket);
  if (found == synced_.end()) return std::nullopt;
  KvSyncResult result = std::move(found->second);
  synced_.erase(found);
  return result;
}

std::optional<std::string> KvExporter::finish() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
    changed_.notify_all();
  }
  if (writer_.joinable()) writer_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

std::vector<int> KvExporter::completed_prompts() {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

void KvExporter::run() {
  for (;;) {
    Chunk chunk;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return !queue_.empty() || closing_; });
      if (queue_.empty()) break;
      chunk = std::move(queue_.front());
      queue_.pop_front();
    }
    bool failed;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      failed = error_.has_value();
    }
    switch (chunk.op) {
      case Chunk::Op::kRows:
        if (!failed) write_chunk(chunk);  // after a failure the queue is only drained
        break;
      case Chunk::Op::kContinue:
        if (!failed) continue_chunk(chunk);
        break;
      case Chunk::Op::kSync:
        sync(chunk.ticket);  // answered after a failure too, with the error
        break;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);  // its bytes leave the queue once written
      queued_bytes_ -= sizeof(float) * (chunk.keys.size() + chunk.values.size());
      changed_.notify_all();
    }
  }
  // A stopped run: prompts that did not finish. An export's partial files are removed; a
  // checkpoint's stay (their manifest says what they are worth).
  while (!open_.empty()) close_file(open_.begin()->first, mode_ == KvFileMode::kExport);
}

void KvExporter::fail(const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!error_) error_ = message;
}

void KvExporter::close_file(int prompt, bool remove) {
  auto found = open_.find(prompt);
  if (found == open_.end()) return;
  if (found->second.fd >= 0) ::close(found->second.fd);
  if (remove) ::unlink(found->second.partial_path.c_str());
  open_.erase(found);
}

KvExporter::OpenFile& KvExporter::open_file(int prompt, bool existing) {
  auto found = open_.find(prompt);
  if (found != open_.end()) return found->second;
  OpenFile file;
  file.final_path = layout_.dir + "/" + kv_file_name(prompt, layout_.stage, layout_.tp_rank);
  // Unique to this process: two runs exporting into one directory never write the same
  // partial file (the last rename wins, and each file is whole). A checkpoint's file has
  // one name: its run holds the output's lock.
  file.partial_path =
      mode_ == KvFileMode::kCheckpoint ? file.final_path : file.final_path + ".partial." + std::to_string(::getpid());
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(file.final_path).parent_path(), error);
  const int64_t tokens = lengths_.at(prompt), first = firsts_.at(prompt);
  file.metadata = kv_file_metadata(layout_, prompt, tokens, hashes_.at(prompt), first);
  file.header = io::safetensors_header(tensor_specs(layout_, tokens - first), layout_.dtype, file.metadata);
  int status = 0;
  if (existing) {  // a checkpoint's file continued: the header must be the one we would write
    file.fd = ::open(file.partial_path.c_str(), O_RDWR | O_CLOEXEC);
    std::vector<char> header(file.header.bytes.size());
    struct stat info {};
    if (file.fd < 0 || ::fstat(file.fd, &info) != 0) {
      status = errno;
    } else if (static_cast<uint64_t>(info.st_size) != file.header.file_size ||
               ::pread(file.fd, header.data(), header.size(), 0) != static_cast<ssize_t>(header.size()) ||
               std::memcmp(header.data(), file.header.bytes.data(), header.size()) != 0) {
      ::close(file.fd);
      throw std::runtime_error("cannot continue " + file.partial_path + ": it is not the file this run would write");
    }
  } else {
    file.fd = ::open(file.partial_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    // The whole file is allocated first (posix_fallocate: a full disk fails here, not mid-prompt).
    status = file.fd < 0 ? errno : ::posix_fallocate(file.fd, 0, static_cast<off_t>(file.header.file_size));
    if (status == EOPNOTSUPP || status == EINVAL)  // file systems without fallocate: a sparse file
      status = ::ftruncate(file.fd, static_cast<off_t>(file.header.file_size)) == 0 ? 0 : errno;
    if (status == 0 && !io::write_at(file.fd, file.header.bytes.data(), file.header.bytes.size(), 0)) status = errno;
  }
  if (status != 0) {
    if (file.fd >= 0) ::close(file.fd);
    if (!existing) ::unlink(file.partial_path.c_str());
    throw std::runtime_error("cannot write " + file.partial_path + ": " + std::strerror(status));
  }
  // A checkpoint's file must still be there after a crash: its name is made durable at once
  // (an export's file gets its final name only when complete, and is synced then).
  if (mode_ == KvFileMode::kCheckpoint && !existing) {
    const fs::path parent = fs::path(file.final_path).parent_path();
    io::sync_directory(parent.string());
    io::sync_directory(parent.parent_path().string());
  }
  return open_.emplace(prompt, std::move(file)).first->second;
}

void KvExporter::continue_chunk(const Chunk& chunk) {
  try {
    OpenFile& file = open_file(chunk.prompt, /*existing=*/true);
    file.next = chunk.pos0;
    file.checksum = chunk.ticket;
  } catch (const std::exception& e) {
    fail(e.what());
  }
}

void KvExporter::sync(uint64_t ticket) {
  KvSyncResult result;
  const auto start = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    result.error = error_;
  }
  for (auto& [prompt, file] : open_) {
    if (result.error) break;
    if (::fdatasync(file.fd) != 0) {
      result.error = "cannot write " + file.partial_path + ": " + std::strerror(errno);
      fail(*result.error);
      break;
    }
    result.files.push_back({prompt, file.next, file.checksum});
  }
  if (result.error) result.files.clear();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::lock_guard<std::mutex> lock(mutex_);
  synced_.emplace(ticket, std::move(result));
  changed_.notify_all();
}

void KvExporter::write_chunk(const Chunk& chunk) {
  try {
    OpenFile& file = open_file(chunk.prompt);
    if (mode_ == KvFileMode::kCheckpoint && chunk.pos0 != file.next)
      throw std::logic_error("checkpoint file of prompt " + std::to_string(chunk.prompt) + ": rows from " +
                             std::to_string(chunk.pos0) + " after " + std::to_string(file.next));
    // Rows before the file's first position (a prefix stored in another entry) are not written.
    const int64_t first = firsts_.at(chunk.prompt), rows_here = lengths_.at(chunk.prompt) - first;
    const int skip = static_cast<int>(std::clamp<int64_t>(first - chunk.pos0, 0, chunk.count));
    const int64_t pos0 = chunk.pos0 + skip;
    const int count = chunk.count - skip;
    const size_t element = static_cast<size_t>(io::dtype_size(layout_.dtype));
    const size_t row_floats = static_cast<size_t>(count) * layout_.head_dim;
    const size_t chunk_floats = static_cast<size_t>(chunk.count) * layout_.head_dim;
    for (int l = 0; l < layout_.layers; ++l) {
      const std::vector<std::string> names = kv_tensor_names(layout_.layer_begin + l, layout_.latent);
      for (size_t part = 0; part < names.size(); ++part) {
        const std::vector<float>& source = part == 0 ? chunk.keys : chunk.values;
        const std::string& name = names[part];
        const uint64_t tensor_begin = file.header.data_begin.at(name);
        const uint64_t tensor_name = name_hash(name);
        for (int h = 0; h < layout_.kv_heads; ++h) {
          const float* rows = source.data() + (static_cast<size_t>(l) * layout_.kv_heads + h) * chunk_floats +
                              static_cast<size_t>(skip) * layout_.head_dim;
          // Head h's rows [pos0, pos0 + count) of a [kv_heads, tokens - first, head_dim] tensor.
          const uint64_t at =
              tensor_begin + (static_cast<uint64_t>(h) * rows_here + (pos0 - first)) * layout_.head_dim * element;
          const void* data = rows;
          if (layout_.dtype == io::Dtype::kBF16) {
            bf16_rows_.resize(row_floats);
            for (size_t i = 0; i < row_floats; ++i) bf16_rows_[i] = io::float_to_bf16(rows[i]);
            data = bf16_rows_.data();
          }
          if (row_floats > 0 && !io::write_at(file.fd, data, row_floats * element, at))
            throw std::runtime_error("cannot write " + file.partial_path + ": " + std::strerror(errno));
          const size_t row_bytes = static_cast<size_t>(layout_.head_dim) * element;
          for (int r = 0; r < count; ++r)
            file.checksum += checksum_term(tensor_name, h, pos0 + r,
                                           row_hash(static_cast<const char*>(data) + r * row_bytes, row_bytes));
        }
      }
    }
    file.next = chunk.pos0 + chunk.count;
    if (!chunk.last) return;
    if (mode_ == KvFileMode::kCheckpoint) {  // done here; a manifest may still name it until rank 0 stores the prompt
      close_file(chunk.prompt, false);
      return;
    }
    // The header again, with the data's checksum in place of the placeholder (same length).
    io::Fnv1a checksum;
    checksum.value = file.checksum;
    file.metadata["data_checksum"] = checksum.hex();
    const io::SafetensorsHeader final_header =
        io::safetensors_header(tensor_specs(layout_, rows_here), layout_.dtype, file.metadata);
    if (final_header.bytes.size() != file.header.bytes.size())
      throw std::logic_error("the KV file's header changed its length");
    if (!io::write_at(file.fd, final_header.bytes.data(), final_header.bytes.size(), 0))
      throw std::runtime_error("cannot write " + file.partial_path + ": " + std::strerror(errno));
    // Durable before it is visible under its final name: a crash leaves a .partial, never a torn file.
    const bool synced = ::fdatasync(file.fd) == 0;
    const int sync_error = errno;
    const bool closed = ::close(file.fd) == 0;  // released even when it fails: never closed twice
    file.fd = -1;
    if (!synced || !closed)
      throw std::runtime_error("cannot write " + file.partial_path + ": " + std::strerror(synced ? errno : sync_error));
    if (::rename(file.partial_path.c_str(), file.final_path.c_str()) != 0)
      throw std::runtime_error("cannot rename " + file.partial_path + ": " + std::strerror(errno));
    open_.erase(chunk.prompt);
    std::lock_guard<std::mutex> lock(mutex_);
    completed_.push_back(chunk.prompt);
  } catch (const std::exception& e) {
    fail(e.what());
    close_file(chunk.prompt, mode_ == KvFileMode::kExport);
  }
}

}  // namespace pf::kv
