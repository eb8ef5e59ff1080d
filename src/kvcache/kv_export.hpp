// KV export (run --save-kv DIR): each rank writes the K and V its stage computed for the layers
// and KV heads it holds, for every prompt, chunk by chunk as chunks finish, so that decoding can
// continue elsewhere (scripts/pipefill_kv.py loads them as transformers' cache). Layout and why:
// docs/formats.md, "KV export".
//
//   DIR/prompt-000007/stage01_tp00.safetensors   one file per (prompt, stage, TP rank)
//   DIR/index.json                                written by rank 0 when the run ends
//
// A file holds `layers.{L}.key` and `layers.{L}.value` for each of its global layers L, each
// [kv_heads, tokens, head_dim] (K after RoPE and q/k norm: what Hugging Face caches), or for an
// MLA model `layers.{L}.latent` [1, tokens, kv_lora_rank + qk_rope_head_dim], and its
// identity in the safetensors __metadata__. The compute thread copies a chunk's rows out of the
// KV pool (StageCompute::read_kv) and queues them; a writer thread puts them at their offsets
// in the prompt's file (written as "NAME.partial.PID", preallocated, then fdatasync'd and renamed
// on the prompt's last chunk), so the next chunk's compute never waits on the disk unless
// 512 MiB of chunks are already waiting for it. A write that fails (a full disk, a directory
// that went away) is kept as the export's error; the rest of the run goes on.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "io/safetensors.hpp"

namespace pf::kv {

// What one rank exports, the same for every prompt but the token count and hash.
struct KvExportLayout {
  std::string dir;
  std::string model_identity;  // identifies config + weights (the run's fingerprints)
  int stage = 0, tp_rank = 0;
  int layer_begin = 0, layers = 0, total_layers = 0;        // global layers [begin, begin + layers)
  int kv_head_begin = 0, kv_heads = 0, total_kv_heads = 0;  // KV heads [begin, begin + kv_heads)
  int head_dim = 0;
  io::Dtype dtype = io::Dtype::kF32;
  // MLA: one latent row per token and layer, the same on every TP rank (kv_heads 1, head_dim
  // the latent's width: kv_lora_rank normed values, then the roped shared key).
  bool latent = false;
  int kv_lora_rank = 0;
};

// The tensors a file holds for global layer `layer`: its key and value, or its latent rows.
std::vector<std::string> kv_tensor_names(int layer, bool latent);

// The format name every file's metadata and DIR/index.json carry.
inline constexpr const char* kKvExportFormat = "pipefill-kv-1";

// The data_checksum of a file being written (kv_checksum.hpp); the real one replaces it, in
// place, before the file gets its final name.
inline constexpr const char* kUnsetChecksum = "0000000000000000";

// A prompt's token hash as the files and the index write it (16 hex digits).
std::string tokens_hash_text(uint64_t tokens_hash);

// The directory of prompt p's files, relative to DIR ("prompt-000007").
std::string kv_prompt_dir_name(int prompt);
// The path of prompt p's file of (stage, tp_rank), relative to DIR.
std::string kv_file_name(int prompt, int stage, int tp_rank);
// The names an export writes in its directory (fnmatch patterns, relative to it): each
// prompt's files and index.json. What a killed run can have left as NAME.partial.PID.
std::vector<std::string> kv_export_file_patterns();

// The __metadata__ a prompt's file holds (and a resumed run checks before trusting it). A file
// of first position F holds rows [F, tokens) (a stored prompt whose prefix is another entry's).
std::map<std::string, std::string> kv_file_metadata(const KvExportLayout& layout, int prompt, int64_t tokens,
                                                    uint64_t tokens_hash, int64_t first_position = 0);

// The rows a reader takes from a file: (tensor name, the head's index in the file).
using RowsCounted = std::set<std::pair<std::string, int>>;

// Why the file at `path` cannot be used (missing, truncated, another model or layout: a
// metadata value that differs from `expected` (kv_file_metadata), tensors other than the
// layers, heads, tokens and dtype it promises, data that fail their checksum), or nullopt when
// it is whole. Reads every byte. `position_sums`, if given, receives the checksum's terms summed
// per position (over the rows in `counted` only, if given), so that rows read later can be
// checked again (kv_source.hpp).
std::optional<std::string> kv_file_problem(const std::string& path, std::map<std::string, std::string> expected,
                                           std::vector<uint64_t>* position_sums = nullptr,
                                           const RowsCounted* counted = nullptr);

// A checkpoint's file (kCheckpoint below): why its rows [0, rows) cannot be used (the file
// missing, another model, layout or prompt, data whose checksum is not `checksum`), or nullopt.
// Reads those rows only. `position_sums` as for kv_file_problem (positions [0, rows)).
std::optional<std::string> kv_rows_problem(const std::string& path, std::map<std::string, std::string> expected,
                                           int64_t rows, uint64_t checksum,
                                           std::vector<uint64_t>* position_sums = nullptr,
                                           const RowsCounted* counted = nullptr);

// True when DIR holds prompt p's finished file of this rank, with this metadata, whole.
bool kv_file_complete(const KvExportLayout& layout, int prompt, int64_t tokens, uint64_t tokens_hash);

// kExport: --save-kv and --kv-store files, written as NAME.partial.PID and renamed on the
// prompt's last chunk (a file under its final name is whole). kCheckpoint: a checkpoint's
// files (pipeline/checkpoint_run.hpp), written under their final names from position 0 on,
// never renamed nor removed by the writer; what their first rows are worth is said by the
// checkpoint's manifest, from the states sync() reports.
enum class KvFileMode { kExport, kCheckpoint };

// A checkpoint file as the writer left it at a sync: rows [0, rows) of `prompt` are on disk
// (fdatasync'd) and their checksum terms sum to `checksum`.
struct KvFileState {
  int prompt = 0;
  int64_t rows = 0;
  uint64_t checksum = 0;
};

struct KvSyncResult {
  std::vector<KvFileState> files;    // every file open at the sync
  std::optional<std::string> error;  // the writer's first failure, if any (then files is empty)
  double seconds = 0;                // the fdatasync calls' time
};

class KvExporter {
 public:
  // `lengths` and `token_hashes` (FNV-1a of each prompt's int32 ids) per prompt;
  // `first_positions` (kExport; empty: 0): each prompt's file holds rows [first, length) only,
  // and rows before are dropped as they come.
  KvExporter(KvExportLayout layout, std::vector<int64_t> lengths, std::vector<uint64_t> token_hashes,
             KvFileMode mode = KvFileMode::kExport, std::vector<int64_t> first_positions = {});
  ~KvExporter();  // finishes (waits for queued writes)
  KvExporter(const KvExporter&) = delete;
  KvExporter& operator=(const KvExporter&) = delete;

  // One chunk's rows, positions [pos0, pos0 + count) of `prompt`: keys and values each
  // [layers][kv_heads][count][head_dim] float32 (the rank's own layers and heads; a latent
  // layout's rows are the keys, values empty). `last`: the
  // prompt's last chunk (its file is completed after this). Blocks only while the queue is full.
  void add_chunk(int prompt, int64_t pos0, int count, std::vector<float> keys, std::vector<float> values, bool last);
  // kCheckpoint, before any chunk of `prompt`: its file already holds rows [0, rows) whose
  // checksum is `checksum` (a resumed run's restored prefix); it is reopened in place (its
  // header must be the one this writer would write) and chunks continue from `rows`.
  void continue_file(int prompt, int64_t rows, uint64_t checksum);
  // kCheckpoint: queued after every chunk added so far; the writer makes every open file
  // durable and records its state. Returns a ticket for sync_result.
  uint64_t request_sync();
  // The result of sync `ticket` once the writer has done it (nullopt before); with `wait`,
  // waits for it.
  std::optional<KvSyncResult> sync_result(uint64_t ticket, bool wait = false);
  // Waits for every queued write; the first failure, if any ("cannot write PATH: reason").
  std::optional<std::string> finish();
  // Prompts whose files this exporter completed.
  std::vector<int> completed_prompts();
  const KvExportLayout& layout() const { return layout_; }
  int64_t length(int prompt) const { return lengths_.at(prompt); }
  int64_t first_position(int prompt) const { return firsts_.at(prompt); }
  uint64_t tokens_hash(int prompt) const { return hashes_.at(prompt); }

 private:
  struct Chunk {
    enum class Op { kRows, kContinue, kSync } op = Op::kRows;
    int prompt = 0;
    int64_t pos0 = 0;  // kContinue: the rows the file holds
    int count = 0;
    std::vector<float> keys, values;
    bool last = false;
    uint64_t ticket = 0;  // kSync; kContinue: the checksum
  };
  struct OpenFile {
    int fd = -1;
    std::string partial_path, final_path;
    std::map<std::string, std::string> metadata;
    io::SafetensorsHeader header;
    uint64_t checksum = 0;  // kv_checksum.hpp, over the rows written so far
    int64_t next = 0;       // rows [0, next) written (kCheckpoint: chunks come in order)
  };
  void run();
  void write_chunk(const Chunk& chunk);
  void continue_chunk(const Chunk& chunk);
  void sync(uint64_t ticket);
  OpenFile& open_file(int prompt, bool existing = false);
  void close_file(int prompt, bool remove);
  void fail(const std::string& message);

  const KvExportLayout layout_;
  const KvFileMode mode_;
  const std::vector<int64_t> lengths_;
  const std::vector<uint64_t> hashes_;
  std::vector<int64_t> firsts_;  // per prompt: the file's first position (set once, in the constructor)
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Chunk> queue_;
  bool closing_ = false;
  std::optional<std::string> error_;         // guarded by mutex_
  std::vector<int> completed_;               // guarded by mutex_
  uint64_t tickets_ = 0;                     // guarded by mutex_: syncs requested
  std::map<uint64_t, KvSyncResult> synced_;  // guarded by mutex_: syncs done, not yet taken
  std::map<int, OpenFile> open_;             // writer thread only
  size_t queued_bytes_ = 0;                  // guarded by mutex_: chunks queued or being written
  std::vector<uint16_t> bf16_rows_;          // writer thread only (dtype conversion)
  std::thread writer_;
};

}  // namespace pf::kv
