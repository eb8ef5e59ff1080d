// Reading a prompt's KV written under any layout (see kv_source.hpp).
#include "kvcache/kv_source.hpp"

#include <algorithm>
#include <filesystem>
#include <regex>
#include <stdexcept>

#include "kvcache/kv_checksum.hpp"

namespace pf::kv {

namespace fs = std::filesystem;

namespace {

// A file of the prompt as its metadata describe it.
struct FileHolding {
  std::string path, name;
  int stage = 0, tp_rank = 0;
  int layer_begin = 0, layer_end = 0, head_begin = 0, head_end = 0;
};

// "3,7" -> {3, 7}; throws on anything else.
std::pair<int, int> range_of(const std::map<std::string, std::string>& metadata, const std::string& key) {
  const std::string& text = metadata.at(key);
  const size_t comma = text.find(',');
  if (comma == std::string::npos) throw std::runtime_error("its " + key + " is not a range");
  return {std::stoi(text.substr(0, comma)), std::stoi(text.substr(comma + 1))};
}

// The prompt's files, the reading rank's own first (a same-layout read takes every row from
// it); those whose header cannot be read are named in `unreadable`.
std::vector<FileHolding> files_of(const std::string& prompt_dir, const std::string& own_name,
                                  std::vector<std::string>& unreadable) {
  static const std::regex pattern("stage[0-9]+_tp[0-9]+\\.safetensors");
  std::vector<FileHolding> found;
  std::error_code error;
  for (const fs::directory_entry& item : fs::directory_iterator(prompt_dir, error)) {
    const std::string name = item.path().filename().string();
    if (!std::regex_match(name, pattern) || !item.is_regular_file(error)) continue;
    try {
      const io::SafetensorsFile file(item.path().string());
      FileHolding f;
      f.path = item.path().string();
      f.name = name;
      f.stage = std::stoi(file.metadata().at("stage"));
      f.tp_rank = std::stoi(file.metadata().at("tp_rank"));
      std::tie(f.layer_begin, f.layer_end) = range_of(file.metadata(), "layers");
      std::tie(f.head_begin, f.head_end) = range_of(file.metadata(), "kv_heads");
      found.push_back(f);
    } catch (const std::exception& e) {
      unreadable.push_back(item.path().string() + ": " + e.what());
    }
  }
  std::sort(found.begin(), found.end(), [&](const FileHolding& a, const FileHolding& b) {
    if ((a.name == own_name) != (b.name == own_name)) return a.name == own_name;
    return a.name < b.name;
  });
  return found;
}

}  // namespace

std::unique_ptr<KvSource> KvSource::open(const KvExportLayout& need, const KvSourceFiles& files, std::string* problem) {
  return open(need, std::vector<KvSourceFiles>{files}, problem);
}

std::unique_ptr<KvSource> KvSource::open(const KvExportLayout& need, const std::vector<KvSourceFiles>& segments,
                                         std::string* problem) {
  auto source = std::unique_ptr<KvSource>(new KvSource);
  source->need_ = need;
  for (size_t s = 0; s < segments.size(); ++s) {
    const KvSourceFiles& files = segments[s];
    const int64_t end = s + 1 < segments.size() ? segments[s + 1].first_position
                        : files.rows < 0        ? files.tokens
                                                : files.rows;
    if (!source->add_segment(files, end, problem)) return nullptr;
  }
  return source;
}

// Whatever goes wrong while checking (a file that cannot be opened: EMFILE, a race with its
// removal) is the segment's problem, reported like any other, never an exception that one rank
// alone would throw while the others wait.
bool KvSource::add_segment(const KvSourceFiles& files, int64_t end, std::string* problem) {
  try {
    return check_segment(files, end, problem);
  } catch (const std::exception& e) {
    *problem = files.prompt_dir + ": " + e.what();
    return false;
  }
}

bool KvSource::check_segment(const KvSourceFiles& files, int64_t end, std::string* problem) {
  const KvExportLayout& need = need_;
  const std::string own_name = fs::path(kv_file_name(files.prompt, need.stage, need.tp_rank)).filename().string();
  std::vector<std::string> unreadable;
  const std::vector<FileHolding> holdings = files_of(files.prompt_dir, own_name, unreadable);
  Segment segment;
  segment.begin = files.first_position;
  segment.end = end;
  // For every (layer, key/value, head) needed, the first file holding it.
  std::vector<int> used;  // indices into holdings, in order of first use
  std::vector<RowsCounted> counted(holdings.size());
  for (int l = need.layer_begin; l < need.layer_begin + need.layers; ++l)
    for (const std::string& tensor : kv_tensor_names(l, need.latent))
      for (int h = need.kv_head_begin; h < need.kv_head_begin + need.kv_heads; ++h) {
        const auto holds = [&](const FileHolding& f) {
          return f.layer_begin <= l && l < f.layer_end && f.head_begin <= h && h < f.head_end;
        };
        const auto found = std::find_if(holdings.begin(), holdings.end(), holds);
        if (found == holdings.end()) {
          // What the reader's own layout would have written there, if it is not there.
          const bool own_missing =
              std::none_of(holdings.begin(), holdings.end(), [&](const FileHolding& f) { return f.name == own_name; });
          *problem = "no file of " + files.prompt_dir + " holds layer " + std::to_string(l) + "'s KV head " +
                     std::to_string(h) +
                     (!unreadable.empty() ? " (" + unreadable.front() + ")"
                      : own_missing       ? " (" + own_name + " is missing)"
                                          : "");
          return false;
        }
        const int index = static_cast<int>(found - holdings.begin());
        const int file = static_cast<int>(std::find(used.begin(), used.end(), index) - used.begin());
        if (file == static_cast<int>(used.size())) used.push_back(index);
        counted[index].insert({tensor, h - found->head_begin});
        segment.slices.push_back({file, tensor, name_hash(tensor), h - found->head_begin});
      }
  if (used.empty()) {
    *problem = "no file of " + files.prompt_dir + " holds any of this rank's layers";
    return false;
  }
  // Each file used, checked whole; the terms of the rows taken from it kept per position.
  if (position_sums_.size() < static_cast<size_t>(end)) position_sums_.resize(static_cast<size_t>(end), 0);
  for (int index : used) {
    const FileHolding& f = holdings[index];
    KvExportLayout wrote = need;
    wrote.stage = f.stage;
    wrote.tp_rank = f.tp_rank;
    wrote.layer_begin = f.layer_begin;
    wrote.layers = f.layer_end - f.layer_begin;
    wrote.kv_head_begin = f.head_begin;
    wrote.kv_heads = f.head_end - f.head_begin;
    const std::map<std::string, std::string> expected =
        kv_file_metadata(wrote, files.prompt, files.tokens, files.tokens_hash, files.first_position);
    std::vector<uint64_t> sums;
    std::optional<std::string> why;
    if (files.rows < 0) {
      why = kv_file_problem(f.path, expected, &sums, &counted[index]);
    } else {
      const auto checksum = files.row_checksums.find(f.name);
      why = checksum == files.row_checksums.end()
                ? std::optional<std::string>("no checksum of its rows")
                : kv_rows_problem(f.path, expected, files.rows, checksum->second, &sums, &counted[index]);
    }
    if (why) {
      *problem = why->rfind(f.path, 0) == 0 ? *why : f.path + ": " + *why;
      return false;
    }
    for (int64_t r = segment.begin; r < end && r < static_cast<int64_t>(sums.size()); ++r)
      position_sums_[static_cast<size_t>(r)] += sums[static_cast<size_t>(r)];
    segment.paths.push_back(f.path);
  }
  const FileHolding& first = holdings[used.front()];
  same_layout_ = segments_.empty() && used.size() == 1 && first.name == own_name &&
                 first.layer_begin == need.layer_begin && first.layer_end == need.layer_begin + need.layers &&
                 first.head_begin == need.kv_head_begin && first.head_end == need.kv_head_begin + need.kv_heads;
  segments_.push_back(std::move(segment));
  return true;
}

void KvSource::read(int64_t pos0, int count, float* keys, float* values) {
  const size_t d = static_cast<size_t>(need_.head_dim);
  const size_t parts = need_.latent ? 1 : 2;
  std::vector<uint64_t> sums(static_cast<size_t>(count), 0);
  for (Segment& segment : segments_) {
    const int64_t a = std::max(pos0, segment.begin), b = std::min(pos0 + count, segment.end);
    if (a >= b) continue;
    if (segment.files.empty())
      for (const std::string& path : segment.paths)
        segment.files.push_back(std::make_unique<io::SafetensorsFile>(path));
    for (size_t s = 0; s < segment.slices.size(); ++s) {
      const Slice& slice = segment.slices[s];
      // slices are [layer][key/value][head]: the place in keys or values follows from s.
      const size_t head = s % need_.kv_heads, part = (s / need_.kv_heads) % parts, layer = s / need_.kv_heads / parts;
      float* rows = (part == 0 ? keys : values) + ((layer * need_.kv_heads + head) * count + (a - pos0)) * d;
      // [kv_heads, tokens - begin, head_dim] as rows of kv_heads: head h's rows are contiguous.
      segment.files[slice.file]->read_block(slice.tensor, slice.file_head, 1,
                                            (a - segment.begin) * static_cast<int64_t>(d),
                                            (b - a) * static_cast<int64_t>(d), rows);
      for (int64_t r = 0; r < b - a; ++r)  // float32 files: the floats are the stored bytes
        sums[a - pos0 + r] +=
            checksum_term(slice.tensor_hash, slice.file_head, a + r, row_hash(rows + r * d, d * sizeof(float)));
    }
    if (b == segment.end) segment.files.clear();  // its last rows read
  }
  for (int r = 0; r < count; ++r)
    if (position_sums_.at(static_cast<size_t>(pos0 + r)) != sums[r])
      throw std::runtime_error(segments_.back().paths.front() + " (or a file beside it): position " +
                               std::to_string(pos0 + r) +
                               " changed after it was checked (written to by something else during this run)");
}

uint64_t KvSource::checksum() const {
  uint64_t sum = 0;
  for (uint64_t term : position_sums_) sum += term;
  return sum;
}

}  // namespace pf::kv
