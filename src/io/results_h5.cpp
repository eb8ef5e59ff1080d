// Output HDF5: the datasets declared in output_format.cpp, plus the root attributes (identity,
// configuration, version). docs/formats.md describes each.
#include "io/results_h5.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "errors.hpp"
#include "io/h5_attributes.hpp"
#include "io/h5_handle.hpp"
#include "io/prompts_h5.hpp"
#include "io/stored_output.hpp"

namespace pf::io {
namespace {

void write_attribute(hid_t object, const std::string& name, const nlohmann::json& value) {
  if (H5Aexists(object, name.c_str()) > 0) H5Adelete(object, name.c_str());
  H5Handle scalar{H5Screate(H5S_SCALAR), H5Sclose};
  if (value.is_number_integer() || value.is_boolean()) {
    const long long v = value.is_boolean() ? (value.get<bool>() ? 1 : 0) : value.get<long long>();
    H5Handle attr{H5Acreate2(object, name.c_str(), H5T_STD_I64LE, scalar.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
    H5_CHECK(H5Awrite(attr.id, H5T_NATIVE_LLONG, &v));
  } else if (value.is_number()) {
    const double v = value.get<double>();
    H5Handle attr{H5Acreate2(object, name.c_str(), H5T_IEEE_F64LE, scalar.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
    H5_CHECK(H5Awrite(attr.id, H5T_NATIVE_DOUBLE, &v));
  } else {
    write_string_attribute(object, name.c_str(), value.is_string() ? value.get<std::string>() : value.dump());
  }
}

// Per-prompt datasets are contiguous and allocated at creation (never filled: every row is
// written before its flag says so). A row's write then lands in bytes reserved for it and
// changes no HDF5 metadata, so a kill in the middle of it cannot damage the file's structure.
H5Handle create_dataset(hid_t file, const DatasetSpec& spec, const OutputLayout& layout) {
  const std::vector<hsize_t> dims = dataset_dims(spec, layout);
  H5Handle space{H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose};
  H5Handle properties{H5Pcreate(H5P_DATASET_CREATE), H5Pclose};
  H5_CHECK(H5Pset_layout(properties.id, H5D_CONTIGUOUS));
  H5_CHECK(H5Pset_alloc_time(properties.id, H5D_ALLOC_TIME_EARLY));
  H5_CHECK(H5Pset_fill_time(properties.id, H5D_FILL_TIME_NEVER));
  H5Handle dataset{
      H5Dcreate2(file, spec.name, file_type(spec.element), space.id, H5P_DEFAULT, properties.id, H5P_DEFAULT),
      H5Dclose};
  H5_CHECK(dataset.id);
  // The initial value, written as doubles: HDF5 converts them to the dataset's type exactly.
  double initial = 0;
  switch (spec.initial) {
    case Initial::kNone:
    case Initial::kAtFinish:
      return dataset;
    case Initial::kFromInput: {
      if (spec.id == Dataset::kTokenSetIds) {
        if (!layout.token_set.empty())
          H5_CHECK(H5Dwrite(dataset.id, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, layout.token_set.data()));
        return dataset;
      }
      if (spec.id != Dataset::kScoreStart)
        throw std::logic_error("create_dataset: no input for /" + std::string(spec.name));
      std::vector<int64_t> starts(dims[0]);
      for (size_t p = 0; p < starts.size(); ++p) starts[p] = layout.first_scored(static_cast<int>(p));
      H5_CHECK(H5Dwrite(dataset.id, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, starts.data()));
      return dataset;
    }
    case Initial::kZero:
      break;
    case Initial::kNaN:
      initial = NAN;
      break;
    case Initial::kMinusOne:
      initial = -1;
      break;
  }
  const std::vector<double> values(dims[0] * (dims.size() > 1 ? dims[1] : 1), initial);
  H5_CHECK(H5Dwrite(dataset.id, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()));
  return dataset;
}

// Rows [first, first + rows) of a dataset [N] (width 0) or [N, width]: the file's selection
// and the matching memory space.
struct RowSelection {
  H5Handle file_space, memory_space;
  RowSelection(hid_t dataset, hsize_t first, hsize_t rows, hsize_t width)
      : file_space{H5Dget_space(dataset), H5Sclose}, memory_space{-1, H5Sclose} {
    hsize_t start[2] = {first, 0}, count[2] = {rows, width};
    H5_CHECK(H5Sselect_hyperslab(file_space.id, H5S_SELECT_SET, start, nullptr, count, nullptr));
    memory_space.id = H5Screate_simple(width > 0 ? 2 : 1, count, nullptr);
  }
};

void write_rows(hid_t dataset, hid_t memory_type, hsize_t first, hsize_t rows, hsize_t width, const void* data) {
  if (rows == 0) return;
  const RowSelection rows_of(dataset, first, rows, width);
  H5_CHECK(H5Dwrite(dataset, memory_type, rows_of.memory_space.id, rows_of.file_space.id, H5P_DEFAULT, data));
}
void write_row(hid_t dataset, hid_t memory_type, hsize_t row, hsize_t width, const void* data) {
  write_rows(dataset, memory_type, row, 1, width, data);
}
// Reads back rows this run wrote (the same selection as write_rows).
void read_back_rows(hid_t dataset, hid_t memory_type, hsize_t first, hsize_t rows, hsize_t width, void* data) {
  if (rows == 0) return;
  const RowSelection rows_of(dataset, first, rows, width);
  H5_CHECK(H5Dread(dataset, memory_type, rows_of.memory_space.id, rows_of.file_space.id, H5P_DEFAULT, data));
}

void write_timeline(hid_t file, const std::vector<trace::TimelineEvent>& events) {
  using trace::TimelineEvent;
  const char* name = dataset_spec(Dataset::kTimeline).name;
  if (H5Lexists(file, name, H5P_DEFAULT) > 0) H5Ldelete(file, name, H5P_DEFAULT);
  H5Handle type{H5Tcreate(H5T_COMPOUND, sizeof(TimelineEvent)), H5Tclose};
  H5Tinsert(type.id, "rank", HOFFSET(TimelineEvent, rank), H5T_NATIVE_INT32);
  H5Tinsert(type.id, "stage", HOFFSET(TimelineEvent, stage), H5T_NATIVE_INT32);
  H5Tinsert(type.id, "tp_rank", HOFFSET(TimelineEvent, tp_rank), H5T_NATIVE_INT32);
  H5Tinsert(type.id, "kind", HOFFSET(TimelineEvent, kind), H5T_NATIVE_INT32);
  H5Tinsert(type.id, "micro_batch", HOFFSET(TimelineEvent, micro_batch), H5T_NATIVE_INT32);
  H5Tinsert(type.id, "prompt", HOFFSET(TimelineEvent, prompt), H5T_NATIVE_INT32);
  H5Tinsert(type.id, "chunk_start", HOFFSET(TimelineEvent, chunk_start), H5T_NATIVE_INT64);
  H5Tinsert(type.id, "chunk_length", HOFFSET(TimelineEvent, chunk_length), H5T_NATIVE_INT32);
  H5Tinsert(type.id, "t_start_s", HOFFSET(TimelineEvent, t_start_s), H5T_NATIVE_DOUBLE);
  H5Tinsert(type.id, "t_end_s", HOFFSET(TimelineEvent, t_end_s), H5T_NATIVE_DOUBLE);
  hsize_t count = events.size();
  H5Handle space{H5Screate_simple(1, &count, nullptr), H5Sclose};
  H5Handle dataset{H5Dcreate2(file, name, type.id, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose};
  H5_CHECK(dataset.id);
  if (count) H5_CHECK(H5Dwrite(dataset.id, type.id, H5S_ALL, H5S_ALL, H5P_DEFAULT, events.data()));
  // The kind names, so readers need not hard-code the enum.
  std::string names;
  for (int k = 0; k < trace::kNumEventKinds; ++k)
    names += (k ? "," : "") + std::string(trace::event_kind_name(static_cast<trace::EventKind>(k)));
  write_attribute(dataset.id, "kind_names", names);
}

// Adds rows [start, start + count) of `prompt` to its digest: their bytes, the NLL of its
// scored positions and, with /is_greedy, whether each scored token was the top-1 of the row
// before it. What write_token_rows streams and continue_prompt reads back agree by construction.
void add_to_digest(const OutputLayout& layout, int prompt, int64_t start, int count, const TokenRowsIn& rows,
                   TokenRowsDigest& digest) {
  const size_t k = static_cast<size_t>(layout.top_k), set = layout.token_set.size();
  const int64_t scored_from = layout.first_scored(prompt);
  if (layout.token_logprobs) {
    digest.logprobs.add(rows.logprobs, sizeof(float) * count);
    for (int64_t j = std::max(start, scored_from); j < start + count; ++j) digest.nll_sum -= rows.logprobs[j - start];
  }
  if (k > 0) {
    digest.topk_ids.add(rows.topk_ids, sizeof(int32_t) * k * count);
    digest.topk_logprobs.add(rows.topk_logprobs, sizeof(float) * k * count);
  }
  digest.with_set = set > 0;
  if (set > 0) digest.set_logprobs.add(rows.set_logprobs, sizeof(float) * set * count);
  digest.with_greedy = layout.is_greedy();
  if (digest.with_greedy) {
    // Row r predicts position r + 1: rows scored_from - 1 .. length - 2 predict the span.
    const int64_t offset = layout.prompt_offsets.at(prompt), length = layout.prompt_offsets.at(prompt + 1) - offset;
    if (!layout.tokens) throw std::logic_error("add_to_digest: /is_greedy needs the input's tokens");
    const std::vector<int32_t>& tokens = *layout.tokens;
    for (int64_t r = std::max(start, scored_from - 1); r < std::min(start + count, length - 1); ++r)
      if (rows.topk_ids[(r - start) * k] != tokens.at(offset + r + 1)) digest.is_greedy = 0;
  }
}

}  // namespace

bool verified_complete_output(const std::string& path, const OutputLayout& layout, const nlohmann::json& identity,
                              double timeout_s) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) return false;
  const StoredOutput stored = [&] {
    try {
      return inspect_output(path, layout, identity, timeout_s);
    } catch (const UserError& e) {
      throw UserError(std::string("--resume: ") + e.what() +
                      ": it is not this run's output (move it aside, or choose another --output)");
    }
  }();
  if (!stored.stale_rows.empty())
    throw UserError(path +
                    " was written by an earlier pipefill, before outputs held /is_greedy: move it aside to "
                    "compute it again");
  if (!stored.torn_rows.empty())
    throw UserError(path + " exists but " + std::to_string(stored.torn_rows.size()) +
                    " row(s) fail their checksum (first: prompt " + std::to_string(stored.torn_rows[0]) +
                    "): the file is damaged; move it aside and run again");
  for (char done : stored.completed)
    if (!done) throw UserError(path + " exists but is not complete: it is damaged; move it aside and run again");
  return true;
}

ResultWriter::ResultWriter(const std::string& path, const OutputLayout& layout, const nlohmann::json& identity,
                           bool resume, double timeout_s, bool disposable)
    : path_(path),
      temporary_path_(path + ".partial"),
      layout_(layout),
      disposable_(disposable),
      completed_(layout.num_prompts, 0) {
  quiet_hdf5_errors();
  lock_ = std::make_unique<OutputLock>(temporary_path_, path_);
  const bool has_content = lock_->existed() && lock_->size_before() > 0;
  if (resume && has_content) {
    StoredOutput stored = [&] {
      try {
        return inspect_output(temporary_path_, layout_, identity, timeout_s);
      } catch (const UserError& e) {
        throw UserError(std::string("cannot resume: ") + e.what() + "; move it aside to start over");
      }
    }();
    completed_ = stored.completed;
    torn_rows_ = stored.torn_rows;
    stale_rows_ = stored.stale_rows;
    // Their flags are cleared with the torn rows' (reopen): both are computed again.
    torn_rows_.insert(torn_rows_.end(), stale_rows_.begin(), stale_rows_.end());
    reopen();
    return;
  }
  if (resume && lock_->existed())
    std::fprintf(stderr, "note: %s is empty (a run killed before its first prompt?): starting over\n",
                 temporary_path_.c_str());
  if (!resume && has_content)
    std::fprintf(stderr, "warning: replacing %s, left by an earlier run (--resume would have continued it)\n",
                 temporary_path_.c_str());
  try {
    create(identity);
  } catch (...) {  // (a study's partial file is this writer's from here: the lock is held)
    if (disposable_) {
      std::remove(temporary_path_.c_str());
      lock_->forget_path();
    }
    throw;
  }
}

void ResultWriter::reopen() {
  const H5Handle access = unlocked_file_access();
  file_ = H5Handle{H5Fopen(temporary_path_.c_str(), H5F_ACC_RDWR, access.id), H5Fclose};
  if (file_.id < 0) throw UserError("cannot reopen " + temporary_path_ + " for writing");
  for (const DatasetSpec& spec : output_datasets()) {
    if (!held_while_partial(spec, layout_)) continue;
    // The inspection checked every dataset's type and shape; one the format gained later
    // than the file was begun is added as a new file would hold it.
    H5Handle& dataset = sets_[static_cast<size_t>(spec.id)];
    if (spec.added_later && H5Lexists(file_.id, spec.name, H5P_DEFAULT) <= 0)
      dataset = create_dataset(file_.id, spec, layout_);
    else
      dataset = H5Handle{H5Dopen2(file_.id, spec.name, H5P_DEFAULT), H5Dclose};
    H5_CHECK(dataset.id);
  }
  // A torn row loses its flag now, so that a kill before it is recomputed cannot hide it.
  const unsigned char not_done = 0;
  for (int prompt : torn_rows_)
    write_row(set_of(Dataset::kCompleted), H5T_NATIVE_UCHAR, static_cast<hsize_t>(prompt), 0, &not_done);
  H5_CHECK(H5Fflush(file_.id, H5F_SCOPE_GLOBAL));
  resumed_ = true;
}

void ResultWriter::create(const nlohmann::json& identity) {
  const H5Handle access = unlocked_file_access();
  file_ = H5Handle{H5Fcreate(temporary_path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.id), H5Fclose};
  if (file_.id < 0) throw UserError("cannot create output file " + temporary_path_);
  for (const DatasetSpec& spec : output_datasets())
    if (held_while_partial(spec, layout_))
      sets_[static_cast<size_t>(spec.id)] = create_dataset(file_.id, spec, layout_);
  write_attribute(file_.id, "resume_identity", identity.dump());
  H5_CHECK(H5Fflush(file_.id, H5F_SCOPE_GLOBAL));
}

void ResultWriter::close_datasets() {
  for (H5Handle& dataset : sets_) H5_CHECK(dataset.reset());
}

ResultWriter::~ResultWriter() {
  for (H5Handle& dataset : sets_) dataset.reset();
  if (disposable_ && !finished_) {  // (whether or not its file is still open: a failed close too)
    file_.reset();
    std::remove(temporary_path_.c_str());
    lock_->forget_path();
    return;
  }
  if (file_.id < 0) return;
  file_.reset();
  if (completed_count() == 0 && !keep_partial_) {  // nothing worth resuming
    std::remove(temporary_path_.c_str());
    lock_->forget_path();
  }
}

void ResultWriter::recompute(const std::vector<int>& prompts) {
  const unsigned char not_done = 0;
  for (int prompt : prompts) {
    write_row(set_of(Dataset::kCompleted), H5T_NATIVE_UCHAR, static_cast<hsize_t>(prompt), 0, &not_done);
    completed_.at(prompt) = 0;
  }
  if (!prompts.empty()) H5_CHECK(H5Fflush(file_.id, H5F_SCOPE_GLOBAL));
}

int ResultWriter::completed_count() const {
  int count = 0;
  for (char c : completed_) count += c != 0;
  return count;
}

void ResultWriter::write_token_rows(int prompt, int64_t start, int count, const TokenRowsIn& rows) {
  if (!layout_.token_rows()) throw std::logic_error("write_token_rows: this output stores no token rows");
  if (start == 0) open_ = OpenPrompt{prompt, 0, {}, {}};
  if (open_.prompt != prompt || open_.next != start)
    throw std::logic_error("write_token_rows: prompt " + std::to_string(prompt) + " rows from " +
                           std::to_string(start) + " arrived out of order");
  const int64_t length = layout_.prompt_offsets.at(prompt + 1) - layout_.prompt_offsets[prompt];
  if (count < 0 || start + count > length) throw std::logic_error("write_token_rows: rows past the prompt's end");
  const hsize_t first = static_cast<hsize_t>(layout_.prompt_offsets[prompt] + start), n = count;
  const size_t k = static_cast<size_t>(layout_.top_k), set = layout_.token_set.size();
  if (layout_.token_logprobs) write_rows(set_of(Dataset::kTokenLogprobs), H5T_NATIVE_FLOAT, first, n, 0, rows.logprobs);
  if (k > 0) {
    write_rows(set_of(Dataset::kTopkIds), H5T_NATIVE_INT32, first, n, k, rows.topk_ids);
    write_rows(set_of(Dataset::kTopkLogprobs), H5T_NATIVE_FLOAT, first, n, k, rows.topk_logprobs);
  }
  if (set > 0) write_rows(set_of(Dataset::kTokenSetLogprobs), H5T_NATIVE_FLOAT, first, n, set, rows.set_logprobs);
  add_to_digest(layout_, prompt, start, count, rows, open_.digest);
  open_.next = start + count;
  open_.at_boundary[open_.next] = open_.digest;
}

std::optional<TokenRowsDigest> ResultWriter::digest_at(int prompt, int64_t position) const {
  if (open_.prompt != prompt) return std::nullopt;
  const auto found = open_.at_boundary.find(position);
  if (found == open_.at_boundary.end()) return std::nullopt;
  return found->second;
}

std::optional<ResultWriter::ContinuedRows> ResultWriter::continue_prompt(int prompt, int64_t rows,
                                                                         const TokenRowsDigest& expected) {
  if (!layout_.token_rows()) throw std::logic_error("continue_prompt: this output stores no token rows");
  const int64_t block = block_rows(layout_.row_shape());
  TokenRowBuffer buffer;
  TokenRowsDigest digest;
  ContinuedRows continued;
  for (int64_t at = 0; at < rows; at += block) {
    const int count = static_cast<int>(std::min(block, rows - at));
    const TokenRowsOut block = buffer.resize(layout_.row_shape(), count);
    read_token_rows(prompt, at, count, block);
    add_to_digest(layout_, prompt, at, count, as_input(block), digest);
    // Finite from the scored span on (log-probs from score_start, other rows from one before).
    continued.finite = continued.finite &&
                       scored_part_finite(layout_.row_shape(), scored_rows(layout_.first_scored(prompt), at, count),
                                          count, as_input(block));
  }
  if (!digest.same_rows(expected)) return std::nullopt;  // (is_greedy follows from the top-k ids)
  open_ = OpenPrompt{prompt, rows, digest, {}};
  return continued;
}

void ResultWriter::flush() {
  H5_CHECK(H5Fflush(file_.id, H5F_SCOPE_GLOBAL));
  // On the disk, not only in the page cache: a checkpoint's manifest names these rows.
  void* handle = nullptr;
  if (H5Fget_vfd_handle(file_.id, H5P_DEFAULT, &handle) >= 0 && handle) ::fsync(*static_cast<int*>(handle));
}

void ResultWriter::read_token_rows(int prompt, int64_t start, int count, const TokenRowsOut& rows) const {
  const int64_t length = layout_.prompt_offsets.at(prompt + 1) - layout_.prompt_offsets[prompt];
  if (!layout_.token_rows() || count < 0 || start < 0 || start + count > length)
    throw std::logic_error("read_token_rows: no such rows");
  const hsize_t first = static_cast<hsize_t>(layout_.prompt_offsets[prompt] + start), n = count;
  const size_t k = static_cast<size_t>(layout_.top_k), set = layout_.token_set.size();
  if (layout_.token_logprobs)
    read_back_rows(set_of(Dataset::kTokenLogprobs), H5T_NATIVE_FLOAT, first, n, 0, rows.logprobs);
  if (k > 0) {
    read_back_rows(set_of(Dataset::kTopkIds), H5T_NATIVE_INT32, first, n, k, rows.topk_ids);
    read_back_rows(set_of(Dataset::kTopkLogprobs), H5T_NATIVE_FLOAT, first, n, k, rows.topk_logprobs);
  }
  if (set > 0) read_back_rows(set_of(Dataset::kTokenSetLogprobs), H5T_NATIVE_FLOAT, first, n, set, rows.set_logprobs);
}

void ResultWriter::write_prompt(int prompt, const float* row, const float* hidden_row, double ttft_s,
                                int64_t reused_tokens, int64_t restored_tokens) {
  const hsize_t at = static_cast<hsize_t>(prompt);
  const TokenRowsDigest* digest = nullptr;
  if (layout_.token_rows()) {
    const int64_t length = layout_.prompt_offsets.at(prompt + 1) - layout_.prompt_offsets[prompt];
    if (open_.prompt != prompt || open_.next != length)
      throw std::logic_error("write_prompt: the token rows of prompt " + std::to_string(prompt) + " are incomplete");
    // exp(mean NLL) over the scored tokens (length - 1 without a span); NaN for a one-token prompt.
    const int64_t scored = length - layout_.first_scored(prompt);
    if (layout_.token_logprobs)
      open_.digest.perplexity = scored > 0 ? std::exp(open_.digest.nll_sum / static_cast<double>(scored)) : NAN;
    digest = &open_.digest;
  }
  const uint64_t checksum =
      row_checksum(row, layout_.with_logits ? layout_.vocab_size : 0, hidden_row, layout_.hidden_size, ttft_s, digest);
  if (layout_.token_logprobs) {
    write_row(set_of(Dataset::kNllSum), H5T_NATIVE_DOUBLE, at, 0, &digest->nll_sum);
    write_row(set_of(Dataset::kPerplexity), H5T_NATIVE_DOUBLE, at, 0, &digest->perplexity);
  }
  if (layout_.is_greedy()) write_row(set_of(Dataset::kIsGreedy), H5T_NATIVE_UCHAR, at, 0, &digest->is_greedy);
  if (layout_.with_logits) write_row(set_of(Dataset::kLogits), H5T_NATIVE_FLOAT, at, layout_.vocab_size, row);
  if (layout_.hidden_size > 0)
    write_row(set_of(Dataset::kHiddenStates), H5T_NATIVE_FLOAT, at, layout_.hidden_size, hidden_row);
  write_row(set_of(Dataset::kTtft), H5T_NATIVE_DOUBLE, at, 0, &ttft_s);
  write_row(set_of(Dataset::kReusedTokens), H5T_NATIVE_INT64, at, 0, &reused_tokens);
  write_row(set_of(Dataset::kRestoredTokens), H5T_NATIVE_INT64, at, 0, &restored_tokens);
  write_row(set_of(Dataset::kRowChecksum), H5T_NATIVE_UINT64, at, 0, &checksum);
  // Two flushes order the writes: the flag reaches the file only after its row is there.
  // One flush would not: HDF5 writes its dirty pieces in no promised order.
  H5_CHECK(H5Fflush(file_.id, H5F_SCOPE_GLOBAL));
  const unsigned char done = 1;
  write_row(set_of(Dataset::kCompleted), H5T_NATIVE_UCHAR, at, 0, &done);
  H5_CHECK(H5Fflush(file_.id, H5F_SCOPE_GLOBAL));
  completed_.at(prompt) = 1;
  ++written_this_run_;
  if (layout_.token_logprobs) {
    scored_tokens_ +=
        layout_.prompt_offsets[prompt + 1] - layout_.prompt_offsets[prompt] - layout_.first_scored(prompt);
    scored_nll_sum_ += digest->nll_sum;
  }
}

bool ResultWriter::finish(const std::vector<trace::TimelineEvent>& timeline, const nlohmann::json& attributes) {
  // A stopped run leaves its partial file as its rows made it: the timeline and attributes
  // change HDF5's metadata, which a kill at the wrong instant could leave unreadable, and a
  // partial file holds hours of rows. They are written once, when every prompt is done.
  if (completed_count() < static_cast<int>(completed_.size())) return false;
  write_timeline(file_.id, timeline);
  if (!layout_.ids.empty()) write_strings(file_.id, dataset_spec(Dataset::kIds).name, layout_.ids);
  for (auto& [key, value] : attributes.items()) write_attribute(file_.id, key, value);
  H5_CHECK(H5Fflush(file_.id, H5F_SCOPE_GLOBAL));
  close_datasets();
  H5_CHECK(file_.reset());
  // Renamed while still locked: no other run can slip in between.
  std::filesystem::rename(temporary_path_, path_);
  lock_->forget_path();
  finished_ = true;
  return true;
}

}  // namespace pf::io
