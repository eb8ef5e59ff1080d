// Output HDF5: /logits float32 [n, vocab], /ttft_s float64 [n], /timeline (compound),
// root attributes (configuration, version).
#include "io/results_h5.hpp"

#include <cstdio>
#include <filesystem>

#include "errors.hpp"
#include "io/h5_handle.hpp"
#include "io/prompts_h5.hpp"

namespace pf::io {

ResultWriter::ResultWriter(const std::string& path, int num_prompts, int vocab_size, bool with_logits)
    : path_(path),
      temporary_path_(path + ".partial"),
      vocab_size_(vocab_size),
      with_logits_(with_logits),
      written_(num_prompts, 0) {
  quiet_hdf5_errors();
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty() && !std::filesystem::is_directory(parent))
    throw UserError("output directory " + parent.string() + " does not exist (create it first)");
  file_ = H5Fcreate(temporary_path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file_ < 0) throw UserError("cannot create output file " + temporary_path_ + " (permissions?)");
  if (!with_logits_) return;
  hsize_t dims[2] = {static_cast<hsize_t>(num_prompts), static_cast<hsize_t>(vocab_size)};
  H5Handle space{H5Screate_simple(2, dims, nullptr), H5Sclose};
  logits_ = H5Dcreate2(file_, "logits", H5T_IEEE_F32LE, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5_CHECK(logits_);
}

ResultWriter::~ResultWriter() {
  if (logits_ >= 0) H5Dclose(logits_);
  if (file_ >= 0) {
    H5Fclose(file_);
    std::remove(temporary_path_.c_str());
  }
}

void ResultWriter::write_logits(int prompt, const float* row) {
  written_.at(prompt) = 1;
  if (!with_logits_) return;
  hsize_t start[2] = {static_cast<hsize_t>(prompt), 0}, count[2] = {1, static_cast<hsize_t>(vocab_size_)};
  H5Handle file_space{H5Dget_space(logits_), H5Sclose};
  H5_CHECK(H5Sselect_hyperslab(file_space.id, H5S_SELECT_SET, start, nullptr, count, nullptr));
  H5Handle memory_space{H5Screate_simple(2, count, nullptr), H5Sclose};
  H5_CHECK(H5Dwrite(logits_, H5T_NATIVE_FLOAT, memory_space.id, file_space.id, H5P_DEFAULT, row));
}

namespace {

void write_attribute(hid_t object, const std::string& name, const nlohmann::json& value) {
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

void write_timeline(hid_t file, const std::vector<trace::TimelineEvent>& events) {
  using trace::TimelineEvent;
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

void ResultWriter::finish(const std::vector<double>& ttft_s, const std::vector<trace::TimelineEvent>& timeline,
                          const nlohmann::json& attributes) {
  for (size_t p = 0; p < written_.size(); ++p)
    if (!written_[p]) throw std::logic_error("logits of prompt " + std::to_string(p) + " never arrived");
  hsize_t count = ttft_s.size();
  H5Handle space{H5Screate_simple(1, &count, nullptr), H5Sclose};
  {
    H5Handle dataset{H5Dcreate2(file_, "ttft_s", H5T_IEEE_F64LE, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                     H5Dclose};
    H5_CHECK(dataset.id);
    H5_CHECK(H5Dwrite(dataset.id, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, ttft_s.data()));
  }
  write_timeline(file_, timeline);
  for (auto& [key, value] : attributes.items()) write_attribute(file_, key, value);
  if (logits_ >= 0) H5_CHECK(H5Dclose(logits_));
  logits_ = -1;
  H5_CHECK(H5Fclose(file_));
  file_ = -1;
  std::filesystem::rename(temporary_path_, path_);
}

}  // namespace pf::io
