// One prompt's KV as any layout wrote it, read by a rank of any layout (a --kv-store entry, a
// checkpoint). Each file of a prompt says in its metadata which global layers and KV heads it
// holds (kv_export.hpp), so a rank finds, for every layer and head it needs, a file holding
// it, and reads exactly those rows: a store filled by a pp 2 run serves a tp 3 run, and a job
// requeued onto another allocation continues its checkpoint. The rows are the float32 values
// the writer computed, so a layout change moves nothing in them; what moves is the new
// layout's own arithmetic on them (docs/checkpoints.md states the bound).
//
// Every file read from is checked first, whole (metadata, tensors, every byte against its
// checksum: a file's checksum covers all its rows, so a rank needing a third of a file's heads
// still reads the file once to trust it), and the checksum terms of the rows this rank takes
// are kept per position, so rows read later are checked again as they are read.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "kvcache/kv_export.hpp"

namespace pf::kv {

// Where a prompt's files are, and what they must hold.
struct KvSourceFiles {
  std::string prompt_dir;  // DIR/prompt-000007: its stageSS_tpTT.safetensors files
  int prompt = 0;          // the prompt number the files carry
  int64_t tokens = 0;      // the prompt's length the files carry
  uint64_t tokens_hash = 0;
  // A checkpoint's files: only rows [0, rows) count, and each file's checksum of them, by file
  // name ("stage01_tp00.safetensors"). Unset (-1): whole files against their own data_checksum.
  int64_t rows = -1;
  std::map<std::string, uint64_t> row_checksums;
  // The files hold rows [first_position, tokens) (a stored prompt whose prefix is another
  // entry's: kv_store.hpp).
  int64_t first_position = 0;
};

class KvSource {
 public:
  // The files of `files` that hold `need`'s layers and KV heads (its stage and TP rank do not
  // matter), each checked; nullptr with `problem` set when they cannot serve ("no file holds
  // layer 7's KV head 2", or a file's own problem, naming it).
  static std::unique_ptr<KvSource> open(const KvExportLayout& need, const KvSourceFiles& files, std::string* problem);
  // A prefix held by a chain of files, each segment's rows [its first_position, the next one's)
  // (the last's: up to its tokens): a stored prompt and the entries holding its prefix.
  static std::unique_ptr<KvSource> open(const KvExportLayout& need, const std::vector<KvSourceFiles>& segments,
                                        std::string* problem);

  // Rows [pos0, pos0 + count) of need's layers and heads, into keys and values each
  // [layers][kv_heads][count][head_dim] (StageCompute::write_kv's layout; a latent layout's rows
  // into keys, values untouched). A row changed since the check, or a file gone, throws
  // std::runtime_error.
  void read(int64_t pos0, int count, float* keys, float* values);

  // True when every row comes from one file of need's own stage and TP rank (the layout that
  // wrote them is this one; one segment).
  bool same_layout() const { return same_layout_; }
  // The checksum terms of rows [0, rows) this rank takes, summed: what a checkpoint writer
  // continuing the rank's own file in place starts from (same_layout() only).
  uint64_t checksum() const;

 private:
  struct Slice {  // one (layer, key/value, head) of `need`, in need's order
    int file = 0;
    std::string tensor;
    uint64_t tensor_hash = 0;
    int file_head = 0;  // the head's index in its file
  };
  struct Segment {  // the files holding positions [begin, end)
    int64_t begin = 0, end = 0;
    std::vector<std::string> paths;
    // Opened at the segment's first read, closed after its last (reads go forward): a run
    // loading many stored prefixes holds the descriptors of one segment at a time.
    std::vector<std::unique_ptr<io::SafetensorsFile>> files;
    std::vector<Slice> slices;
  };
  // One segment's files checked, its slices found; false with `problem` set.
  bool add_segment(const KvSourceFiles& files, int64_t end, std::string* problem);
  bool check_segment(const KvSourceFiles& files, int64_t end, std::string* problem);
  KvExportLayout need_;
  std::vector<Segment> segments_;
  std::vector<uint64_t> position_sums_;
  bool same_layout_ = false;
};

}  // namespace pf::kv
