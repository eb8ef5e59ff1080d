// Output HDF5: /logits float32 [n, vocab], /completed uint8 [n], /ttft_s float64 [n],
// /timeline (compound), root attributes (identity, configuration, version).
#include "io/results_h5.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "errors.hpp"
#include "io/h5_handle.hpp"
#include "io/prompts_h5.hpp"

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
    const std::string text = value.is_string() ? value.get<std::string>() : value.dump();
    H5Handle type{H5Tcopy(H5T_C_S1), H5Tclose};
    H5_CHECK(H5Tset_size(type.id, text.empty() ? 1 : text.size()));
    H5Handle attr{H5Acreate2(object, name.c_str(), type.id, scalar.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
    H5_CHECK(H5Awrite(attr.id, type.id, text.c_str()));
  }
}

std::string read_string_attribute(hid_t object, const char* name) {
  if (H5Aexists(object, name) <= 0) return "";
  H5Handle attr{H5Aopen(object, name, H5P_DEFAULT), H5Aclose};
  H5Handle type{H5Aget_type(attr.id), H5Tclose};
  std::string text(H5Tget_size(type.id), '\0');
  H5Handle memory{H5Tcopy(H5T_C_S1), H5Tclose};
  H5Tset_size(memory.id, text.size());
  if (H5Aread(attr.id, memory.id, text.data()) < 0) return "";
  return text;
}

hid_t create_dataset(hid_t file, const char* name, hid_t type, int rank, const hsize_t* dims, const hsize_t* chunk) {
  H5Handle space{H5Screate_simple(rank, dims, nullptr), H5Sclose};
  H5Handle properties{H5Pcreate(H5P_DATASET_CREATE), H5Pclose};
  if (dims[0] > 0) H5_CHECK(H5Pset_chunk(properties.id, rank, chunk));  // written row by row
  const hid_t dataset = H5Dcreate2(file, name, type, space.id, H5P_DEFAULT, properties.id, H5P_DEFAULT);
  H5_CHECK(dataset);
  return dataset;
}

void write_row(hid_t dataset, hid_t memory_type, hsize_t row, hsize_t width, const void* data) {
  const int rank = width > 0 ? 2 : 1;
  hsize_t start[2] = {row, 0}, count[2] = {1, width};
  H5Handle file_space{H5Dget_space(dataset), H5Sclose};
  H5_CHECK(H5Sselect_hyperslab(file_space.id, H5S_SELECT_SET, start, nullptr, count, nullptr));
  H5Handle memory_space{H5Screate_simple(rank, count, nullptr), H5Sclose};
  H5_CHECK(H5Dwrite(dataset, memory_type, memory_space.id, file_space.id, H5P_DEFAULT, data));
}

void write_timeline(hid_t file, const std::vector<trace::TimelineEvent>& events) {
  using trace::TimelineEvent;
  if (H5Lexists(file, "timeline", H5P_DEFAULT) > 0) H5Ldelete(file, "timeline", H5P_DEFAULT);
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
  H5Handle dataset{H5Dcreate2(file, "timeline", type.id, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose};
  H5_CHECK(dataset.id);
  if (count) H5_CHECK(H5Dwrite(dataset.id, type.id, H5S_ALL, H5S_ALL, H5P_DEFAULT, events.data()));
  // The kind names, so readers need not hard-code the enum.
  std::string names;
  for (int k = 0; k < trace::kNumEventKinds; ++k)
    names += (k ? "," : "") + std::string(trace::event_kind_name(static_cast<trace::EventKind>(k)));
  write_attribute(dataset.id, "kind_names", names);
}

}  // namespace

bool output_complete(const std::string& path) { return std::filesystem::exists(path); }

ResultWriter::ResultWriter(const std::string& path, int num_prompts, int vocab_size, bool with_logits,
                           const nlohmann::json& identity, bool resume)
    : path_(path),
      temporary_path_(path + ".partial"),
      vocab_size_(vocab_size),
      with_logits_(with_logits),
      completed_(num_prompts, 0) {
  quiet_hdf5_errors();
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty() && !std::filesystem::is_directory(parent))
    throw UserError("output directory " + parent.string() + " does not exist (create it first)");
  const std::string identity_text = identity.dump();
  if (resume && std::filesystem::exists(temporary_path_)) {
    file_ = H5Fopen(temporary_path_.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    if (file_ < 0)
      throw UserError(temporary_path_ + " cannot be opened to resume (damaged by a crash?); delete it to start over");
    const nlohmann::json stored = nlohmann::json::parse(read_string_attribute(file_, "resume_identity"), nullptr, false);
    for (auto& [key, value] : identity.items())
      if (stored.is_discarded() || !stored.contains(key) || stored[key] != value) {
        H5Fclose(file_);
        file_ = -1;
        throw UserError("cannot resume " + temporary_path_ + ": it was written with another " + key + " (" +
                        (stored.is_discarded() || !stored.contains(key) ? "none" : stored[key].dump()) +
                        ", this run: " + value.dump() + ")");
      }
    completed_set_ = H5Dopen2(file_, "completed", H5P_DEFAULT);
    ttft_set_ = H5Dopen2(file_, "ttft_s", H5P_DEFAULT);
    if (with_logits_) logits_ = H5Dopen2(file_, "logits", H5P_DEFAULT);
    H5_CHECK(completed_set_);
    H5_CHECK(ttft_set_);
    H5_CHECK(H5Dread(completed_set_, H5T_NATIVE_CHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, completed_.data()));
    resumed_ = true;
    return;
  }
  file_ = H5Fcreate(temporary_path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file_ < 0) throw UserError("cannot create output file " + temporary_path_ + " (permissions?)");
  const hsize_t n = static_cast<hsize_t>(num_prompts), chunk_rows = 1;
  if (with_logits_) {
    const hsize_t dims[2] = {n, static_cast<hsize_t>(vocab_size)}, chunk[2] = {1, static_cast<hsize_t>(vocab_size)};
    logits_ = create_dataset(file_, "logits", H5T_IEEE_F32LE, 2, dims, chunk);
  }
  completed_set_ = create_dataset(file_, "completed", H5T_STD_U8LE, 1, &n, &chunk_rows);
  ttft_set_ = create_dataset(file_, "ttft_s", H5T_IEEE_F64LE, 1, &n, &chunk_rows);
  const std::vector<char> zeros(num_prompts, 0);
  const std::vector<double> unknown(num_prompts, NAN);
  if (n > 0) {
    H5_CHECK(H5Dwrite(completed_set_, H5T_NATIVE_CHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros.data()));
    H5_CHECK(H5Dwrite(ttft_set_, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, unknown.data()));
  }
  write_attribute(file_, "resume_identity", identity_text);
  H5_CHECK(H5Fflush(file_, H5F_SCOPE_GLOBAL));
}

ResultWriter::~ResultWriter() {
  for (hid_t dataset : {logits_, completed_set_, ttft_set_})
    if (dataset >= 0) H5Dclose(dataset);
  if (file_ < 0) return;
  H5Fclose(file_);
  if (completed_count() == 0) std::remove(temporary_path_.c_str());  // nothing worth resuming
}

int ResultWriter::completed_count() const {
  int count = 0;
  for (char c : completed_) count += c != 0;
  return count;
}

void ResultWriter::write_logits(int prompt, const float* row, double ttft_s) {
  if (with_logits_) write_row(logits_, H5T_NATIVE_FLOAT, static_cast<hsize_t>(prompt), vocab_size_, row);
  write_row(ttft_set_, H5T_NATIVE_DOUBLE, static_cast<hsize_t>(prompt), 0, &ttft_s);
  const char done = 1;
  write_row(completed_set_, H5T_NATIVE_CHAR, static_cast<hsize_t>(prompt), 0, &done);
  // The flag is written after the row and both are flushed: a kill leaves no prompt marked
  // complete without its logits.
  H5_CHECK(H5Fflush(file_, H5F_SCOPE_GLOBAL));
  completed_.at(prompt) = 1;
  ++written_this_run_;
}

bool ResultWriter::finish(const std::vector<trace::TimelineEvent>& timeline, const nlohmann::json& attributes) {
  write_timeline(file_, timeline);
  for (auto& [key, value] : attributes.items()) write_attribute(file_, key, value);
  H5_CHECK(H5Fflush(file_, H5F_SCOPE_GLOBAL));
  if (completed_count() < static_cast<int>(completed_.size())) return false;  // stopped early: keep .partial
  for (hid_t* dataset : {&logits_, &completed_set_, &ttft_set_})
    if (*dataset >= 0) {
      H5_CHECK(H5Dclose(*dataset));
      *dataset = -1;
    }
  H5_CHECK(H5Fclose(file_));
  file_ = -1;
  std::filesystem::rename(temporary_path_, path_);
  return true;
}

}  // namespace pf::io
