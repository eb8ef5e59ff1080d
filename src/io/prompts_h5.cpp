// HDF5 prompt reading (validated) and writing (for make-prompts).
#include "io/prompts_h5.hpp"

#include <hdf5.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <new>

#include "errors.hpp"
#include "io/file_checks.hpp"
#include "io/fnv1a.hpp"
#include "io/h5_attributes.hpp"
#include "io/h5_handle.hpp"
#include "io/isolated_call.hpp"
#include "io/output_lock.hpp"

namespace pf::io {
namespace {

// HDF5 converts a value out of the memory type's range to the nearest one in it, silently
// (a uint64 2^63 + 5 read as int64 2^63 - 1): the read fails instead.
H5T_conv_ret_t refuse_out_of_range(H5T_conv_except_t kind, hid_t, hid_t, void*, void*, void*) {
  return kind == H5T_CONV_EXCEPT_RANGE_HI || kind == H5T_CONV_EXCEPT_RANGE_LOW ? H5T_CONV_ABORT : H5T_CONV_UNHANDLED;
}

// Reads a 1-D integer dataset into `out`, converting to T (a value out of T's range: an error).
template <typename T>
void read_int_dataset(hid_t file, const std::string& path, const char* name, hid_t memory_type, std::vector<T>& out) {
  const std::string where = path + ": /" + name;
  if (H5Lexists(file, name, H5P_DEFAULT) <= 0) throw UserError(where + " is missing");
  H5Handle dataset{H5Dopen2(file, name, H5P_DEFAULT), H5Dclose};
  if (dataset.id < 0) throw UserError(where + " is not a dataset");
  H5Handle type{H5Dget_type(dataset.id), H5Tclose};
  if (H5Tget_class(type.id) != H5T_INTEGER) throw UserError(where + " must hold integers");
  H5Handle space{H5Dget_space(dataset.id), H5Sclose};
  if (H5Sget_simple_extent_ndims(space.id) != 1) throw UserError(where + " must be 1-D");
  hsize_t count = 0;
  H5Sget_simple_extent_dims(space.id, &count, nullptr);
  // A file can declare a dataspace far larger than the data it stores (unwritten chunks
  // read as fill values); refuse sizes no input can have before allocating for them.
  constexpr hsize_t kMaxElements = hsize_t{1} << 36;
  if (count > kMaxElements)
    throw UserError(where + " declares " + std::to_string(count) + " elements: not a real input");
  H5Handle creation{H5Dget_create_plist(dataset.id), H5Pclose};
  const hsize_t stored = H5Dget_storage_size(dataset.id);
  const size_t element = H5Tget_size(type.id);
  if (creation.id >= 0 && H5Pget_nfilters(creation.id) == 0 && element > 0 && stored / element < count)
    throw UserError(where + " declares " + std::to_string(count) + " elements but stores only " +
                    std::to_string(stored) + " bytes (truncated or corrupt file)");
  try {
    out.resize(static_cast<size_t>(count));
  } catch (const std::bad_alloc&) {
    throw UserError(where + ": not enough memory for " + std::to_string(count) + " elements");
  }
  H5Handle transfer{H5Pcreate(H5P_DATASET_XFER), H5Pclose};
  H5_CHECK(transfer.id);
  H5_CHECK(H5Pset_type_conv_cb(transfer.id, refuse_out_of_range, nullptr));
  if (count > 0 && H5Dread(dataset.id, memory_type, H5S_ALL, H5S_ALL, transfer.id, out.data()) < 0)
    throw UserError(where + " cannot be read as " + std::to_string(8 * sizeof(T)) +
                    "-bit signed integers (a value outside their range, or a damaged file)");
}

// Whether `text` is well-formed UTF-8 (the output declares its strings so).
bool valid_utf8(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const int extra = byte < 0x80 ? 0 : (byte >> 5) == 6 ? 1 : (byte >> 4) == 14 ? 2 : (byte >> 3) == 30 ? 3 : -1;
    if (extra < 0 || i + extra >= text.size()) return false;
    for (int j = 1; j <= extra; ++j)
      if ((static_cast<unsigned char>(text[i + j]) >> 6) != 2) return false;
    i += 1 + extra;
  }
  return true;
}

// Reads a 1-D dataset of `expected` variable-length strings (what h5py writes for a list of
// str, in either character set); refuses another count before allocating for it.
std::vector<std::string> read_string_dataset(hid_t file, const std::string& path, const char* name, size_t expected) {
  const std::string where = path + ": /" + name;
  H5Handle dataset{H5Dopen2(file, name, H5P_DEFAULT), H5Dclose};
  if (dataset.id < 0) throw UserError(where + " is not a dataset");
  H5Handle type{H5Dget_type(dataset.id), H5Tclose};
  if (H5Tget_class(type.id) != H5T_STRING || H5Tis_variable_str(type.id) <= 0)
    throw UserError(where + " must hold variable-length strings (h5py: dtype=h5py.string_dtype())");
  H5Handle space{H5Dget_space(dataset.id), H5Sclose};
  if (H5Sget_simple_extent_ndims(space.id) != 1) throw UserError(where + " must be 1-D");
  hsize_t count = 0;
  H5Sget_simple_extent_dims(space.id, &count, nullptr);
  if (count != expected)
    throw UserError(where + " holds " + std::to_string(count) + " strings for " + std::to_string(expected) +
                    " prompts");
  std::vector<char*> pointers(static_cast<size_t>(count), nullptr);
  H5Handle memory{H5Tcopy(H5T_C_S1), H5Tclose};
  H5Tset_size(memory.id, H5T_VARIABLE);
  H5Tset_cset(memory.id, H5Tget_cset(type.id));  // ASCII or UTF-8, as stored: HDF5 converts neither
  if (count > 0 && H5Dread(dataset.id, memory.id, H5S_ALL, H5S_ALL, H5P_DEFAULT, pointers.data()) < 0)
    throw UserError(where + " cannot be read as strings");
  std::vector<std::string> out;
  out.reserve(pointers.size());
  for (char* text : pointers) out.emplace_back(text ? text : "");
  if (count > 0) H5Dvlen_reclaim(memory.id, space.id, H5P_DEFAULT, pointers.data());
  for (size_t i = 0; i < out.size(); ++i)
    if (!valid_utf8(out[i])) throw UserError(where + ": string " + std::to_string(i) + " is not valid UTF-8");
  return out;
}

// The optional per-prompt datasets: /score_start (1 <= s < length) and /ids.
void read_prompt_extras(hid_t file, const std::string& path, PromptSet& prompts) {
  const std::vector<int64_t> lengths = prompts.lengths();
  const size_t n = lengths.size();
  if (H5Lexists(file, "score_start", H5P_DEFAULT) > 0) {
    read_int_dataset(file, path, "score_start", H5T_NATIVE_INT64, prompts.score_start);
    if (prompts.score_start.size() != n)
      throw UserError(path + ": /score_start holds " + std::to_string(prompts.score_start.size()) + " entries for " +
                      std::to_string(n) + " prompts");
    for (size_t i = 0; i < n; ++i) {
      const int64_t s = prompts.score_start[i];
      if (s < 1 || (s >= lengths[i] && s != 1))  // 1, the default, also for a one-token prompt
        throw UserError(path + ": /score_start of prompt " + std::to_string(i) + " is " + std::to_string(s) +
                        ": it must be at least 1 (position 0 has no log-prob) and below the prompt's length " +
                        std::to_string(lengths[i]) + " (at least one token scored), or 1");
    }
  }
  if (H5Lexists(file, "ids", H5P_DEFAULT) > 0) {
    prompts.ids = read_string_dataset(file, path, "ids", n);
  }
}

// The isolated reader's reply: sizes, then each vector's bytes, then the ids (length, bytes).
std::string serialize(const PromptSet& p) {
  const int64_t sizes[4] = {static_cast<int64_t>(p.tokens.size()), static_cast<int64_t>(p.offsets.size()),
                            static_cast<int64_t>(p.score_start.size()), static_cast<int64_t>(p.ids.size())};
  std::string out(reinterpret_cast<const char*>(sizes), sizeof sizes);
  out.append(reinterpret_cast<const char*>(p.tokens.data()), p.tokens.size() * sizeof(int32_t));
  out.append(reinterpret_cast<const char*>(p.offsets.data()), p.offsets.size() * sizeof(int64_t));
  out.append(reinterpret_cast<const char*>(p.score_start.data()), p.score_start.size() * sizeof(int64_t));
  for (const std::string& id : p.ids) {
    const int64_t size = static_cast<int64_t>(id.size());
    out.append(reinterpret_cast<const char*>(&size), sizeof size);
    out.append(id);
  }
  return out;
}

PromptSet deserialize(const std::string& bytes) {
  int64_t sizes[4];
  std::memcpy(sizes, bytes.data(), sizeof sizes);
  const char* at = bytes.data() + sizeof sizes;
  PromptSet prompts;
  const auto take = [&at](auto& vector, int64_t count) {
    vector.resize(static_cast<size_t>(count));
    if (vector.empty()) return;  // data() may be null: memcpy must not see it
    std::memcpy(vector.data(), at, vector.size() * sizeof(vector[0]));
    at += vector.size() * sizeof(vector[0]);
  };
  take(prompts.tokens, sizes[0]);
  take(prompts.offsets, sizes[1]);
  take(prompts.score_start, sizes[2]);
  for (int64_t i = 0; i < sizes[3]; ++i) {
    int64_t size = 0;
    std::memcpy(&size, at, sizeof size);
    at += sizeof size;
    prompts.ids.emplace_back(at, static_cast<size_t>(size));
    at += size;
  }
  return prompts;
}

}  // namespace

PromptSet read_prompts_isolated(const std::string& path, int vocab_size, double timeout_s) {
  return deserialize(
      run_isolated("input file " + path, timeout_s, [&] { return serialize(read_prompts(path, vocab_size)); }));
}

void quiet_hdf5_errors() {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

std::vector<int64_t> PromptSet::lengths() const {
  std::vector<int64_t> result;
  for (size_t i = 0; i + 1 < offsets.size(); ++i) result.push_back(offsets[i + 1] - offsets[i]);
  return result;
}

PromptSet read_prompts(const std::string& path, int vocab_size) {
  quiet_hdf5_errors();
  require_regular_file(path, "input file");
  if (access(path.c_str(), R_OK) != 0) throw UserError("cannot read input file " + path);
  if (H5Fis_hdf5(path.c_str()) <= 0) throw UserError(path + " is not an HDF5 file");
  H5Handle file{H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose};
  if (file.id < 0) throw UserError("cannot open input file " + path);

  PromptSet prompts;
  read_int_dataset(file.id, path, "tokens", H5T_NATIVE_INT32, prompts.tokens);
  read_int_dataset(file.id, path, "offsets", H5T_NATIVE_INT64, prompts.offsets);

  const auto& off = prompts.offsets;
  if (off.size() < 2) throw UserError(path + ": /offsets needs at least 2 entries (n prompts -> n + 1 offsets)");
  if (off[0] != 0) throw UserError(path + ": /offsets must start at 0 (found " + std::to_string(off[0]) + ")");
  for (size_t i = 0; i + 1 < off.size(); ++i) {
    if (off[i + 1] == off[i]) throw UserError(path + ": prompt " + std::to_string(i) + " is empty");
    if (off[i + 1] < off[i])
      throw UserError(path + ": /offsets must increase (offsets[" + std::to_string(i + 1) + "] < offsets[" +
                      std::to_string(i) + "])");
  }
  const int64_t total = static_cast<int64_t>(prompts.tokens.size());
  if (off.back() != total)
    throw UserError(path + ": the last offset is " + std::to_string(off.back()) + " but /tokens holds " +
                    std::to_string(total) + " tokens" + (off.back() > total ? " (past the end)" : ""));
  for (int64_t i = 0; i < total; ++i) {
    const int32_t id = prompts.tokens[i];
    if (id < 0 || id >= vocab_size)
      throw UserError(path + ": token id " + std::to_string(id) + " at position " + std::to_string(i) +
                      " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
  }
  read_prompt_extras(file.id, path, prompts);
  return prompts;
}

uint64_t fingerprint(const PromptSet& prompts) {
  // An input without the optional datasets keeps the fingerprint it had before they existed.
  Fnv1a hash;
  hash.add(prompts.tokens.data(), prompts.tokens.size() * sizeof(int32_t))
      .add(prompts.offsets.data(), prompts.offsets.size() * sizeof(int64_t));
  if (!prompts.score_start.empty())
    hash.add("score_start", 11).add(prompts.score_start.data(), prompts.score_start.size() * sizeof(int64_t));
  if (!prompts.ids.empty()) {
    hash.add("ids", 3);
    for (const std::string& id : prompts.ids) hash.add(id.data(), id.size() + 1);  // with its NUL: "a","b" != "ab"
  }
  return hash.value;
}

void check_prompt_lengths(const PromptSet& prompts, int max_position_embeddings, bool allow_longer) {
  if (max_position_embeddings <= 0 || allow_longer) return;
  const auto lengths = prompts.lengths();
  for (size_t p = 0; p < lengths.size(); ++p)
    if (lengths[p] > max_position_embeddings)
      throw UserError("prompt " + std::to_string(p) + " has " + std::to_string(lengths[p]) +
                      " tokens, more than the model's max_position_embeddings (" +
                      std::to_string(max_position_embeddings) + "); pass --allow-long-prompts to run it anyway");
}

static void write_prompts_file(const std::string& path, const PromptSet& prompts) {
  const H5Handle access = unlocked_file_access();
  H5Handle file{H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.id), H5Fclose};
  if (file.id < 0) throw UserError("cannot create " + path + " (does its directory exist?)");
  auto write = [&](const char* name, hid_t file_type, hid_t memory_type, const void* data, hsize_t count) {
    H5Handle space{H5Screate_simple(1, &count, nullptr), H5Sclose};
    H5Handle dataset{H5Dcreate2(file.id, name, file_type, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose};
    H5_CHECK(dataset.id);
    H5_CHECK(H5Dwrite(dataset.id, memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
  };
  write("tokens", H5T_STD_I32LE, H5T_NATIVE_INT32, prompts.tokens.data(), prompts.tokens.size());
  write("offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, prompts.offsets.data(), prompts.offsets.size());
  if (!prompts.score_start.empty())
    write("score_start", H5T_STD_I64LE, H5T_NATIVE_INT64, prompts.score_start.data(), prompts.score_start.size());
  if (!prompts.ids.empty()) write_strings(file.id, "ids", prompts.ids);
  write_string_attribute(file.id, kGeneratorAttribute, kMakePromptsGenerator);
  // The last of the data reach the disk at the flush and close: a full disk fails here.
  H5_CHECK(H5Fflush(file.id, H5F_SCOPE_GLOBAL));
  H5_CHECK(file.reset());
}

void write_prompts(const std::string& path, const PromptSet& prompts) {
  quiet_hdf5_errors();
  // Written beside the path and renamed over it once closed: a killed or failed write leaves
  // the file that was there (or none), never a torn one. The partial file is a run's output
  // protocol (io/output_lock.hpp): a run writing the same path keeps it, and a stopped run's
  // resumable partial is replaced only with a warning.
  const std::string partial = path + ".partial";
  OutputLock lock(partial, path);
  if (lock.existed() && lock.size_before() > 0)
    std::fprintf(stderr, "warning: replacing %s, left by an earlier run\n", partial.c_str());
  try {
    write_prompts_file(partial, prompts);
  } catch (...) {  // (a full disk: no half-written file stays behind)
    std::remove(partial.c_str());
    lock.forget_path();
    throw;
  }
  if (std::rename(partial.c_str(), path.c_str()) != 0) {
    std::remove(partial.c_str());
    lock.forget_path();
    throw UserError("cannot write " + path + " (renaming " + partial + " over it failed)");
  }
  lock.forget_path();
}

void write_strings(hid_t file, const char* name, const std::vector<std::string>& strings) {
  if (H5Lexists(file, name, H5P_DEFAULT) > 0) H5_CHECK(H5Ldelete(file, name, H5P_DEFAULT));  // a finish retried
  H5Handle type{H5Tcopy(H5T_C_S1), H5Tclose};
  H5_CHECK(H5Tset_size(type.id, H5T_VARIABLE));
  H5_CHECK(H5Tset_cset(type.id, H5T_CSET_UTF8));
  const hsize_t count = strings.size();
  H5Handle space{H5Screate_simple(1, &count, nullptr), H5Sclose};
  H5Handle dataset{H5Dcreate2(file, name, type.id, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose};
  H5_CHECK(dataset.id);
  std::vector<const char*> pointers;
  for (const std::string& text : strings) pointers.push_back(text.c_str());
  if (count > 0) H5_CHECK(H5Dwrite(dataset.id, type.id, H5S_ALL, H5S_ALL, H5P_DEFAULT, pointers.data()));
}

}  // namespace pf::io
