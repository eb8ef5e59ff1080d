// Inspecting an existing output (see stored_output.hpp).
#include "io/stored_output.hpp"

#include <hdf5.h>

#include <algorithm>
#include <array>
#include <optional>

#include "errors.hpp"
#include "io/file_checks.hpp"
#include "io/fnv1a.hpp"
#include "io/h5_attributes.hpp"
#include "io/h5_handle.hpp"
#include "io/isolated_call.hpp"
#include "io/output_format.hpp"
#include "io/prompts_h5.hpp"

namespace pf::io {
namespace {

// Opens `name` and checks its class, element size and shape; UserError naming what is off.
H5Handle open_checked(hid_t file, const std::string& path, const DatasetSpec& spec, const OutputLayout& layout) {
  const std::string where = path + ": /" + spec.name;
  if (H5Lexists(file, spec.name, H5P_DEFAULT) <= 0) throw UserError(where + " is missing");
  H5Handle dataset{H5Dopen2(file, spec.name, H5P_DEFAULT), H5Dclose};
  if (dataset.id < 0) throw UserError(where + " is not a dataset");
  const std::vector<hsize_t> dims = dataset_dims(spec, layout);
  H5Handle type{H5Dget_type(dataset.id), H5Tclose};
  H5Handle space{H5Dget_space(dataset.id), H5Sclose};
  const int rank = H5Sget_simple_extent_ndims(space.id);
  std::vector<hsize_t> actual(rank > 0 ? rank : 0);
  if (rank > 0) H5Sget_simple_extent_dims(space.id, actual.data(), nullptr);
  if (H5Tget_class(type.id) != type_class(spec.element) || H5Tget_size(type.id) != element_size(spec.element) ||
      actual != dims) {
    std::string expected;
    for (hsize_t d : dims) expected += (expected.empty() ? "" : " x ") + std::to_string(d);
    throw UserError(where + " does not have this run's type and shape (" + expected + ")");
  }
  return dataset;
}

// Rows [first, first + rows) of a dataset [N] (width 0) or [N, width].
void read_rows(hid_t dataset, hid_t memory_type, hsize_t first, hsize_t rows, hsize_t width, void* out) {
  const int rank = width > 0 ? 2 : 1;
  hsize_t start[2] = {first, 0}, count[2] = {rows, width};
  H5Handle file_space{H5Dget_space(dataset), H5Sclose};
  H5Sselect_hyperslab(file_space.id, H5S_SELECT_SET, start, nullptr, count, nullptr);
  H5Handle memory_space{H5Screate_simple(rank, count, nullptr), H5Sclose};
  if (H5Dread(dataset, memory_type, memory_space.id, file_space.id, H5P_DEFAULT, out) < 0)
    throw UserError("cannot read rows " + std::to_string(first) + ".." + std::to_string(first + rows));
}
void read_row(hid_t dataset, hid_t memory_type, hsize_t row, hsize_t width, void* out) {
  read_rows(dataset, memory_type, row, 1, width, out);
}

// The layout's datasets as opened by the inspection, by Dataset (-1 for those it has not).
struct OpenDatasets {
  std::array<H5Handle, kNumDatasets> sets;
  hid_t operator[](Dataset id) const { return sets[static_cast<size_t>(id)].id; }
};

// Prompt p's token rows, hashed as ResultWriter::write_token_rows streamed them (in blocks of
// at most 16 MiB, whatever the prompt's length), with its stored NLL and perplexity.
TokenRowsDigest digest_token_rows(const OpenDatasets& sets, const OutputLayout& layout, hsize_t p) {
  TokenRowsDigest digest;
  const hsize_t begin = layout.prompt_offsets[p], end = layout.prompt_offsets[p + 1];
  const hsize_t k = static_cast<hsize_t>(layout.top_k), set = layout.token_set.size();
  const hsize_t kBlock = std::max<hsize_t>(1, (hsize_t{1} << 22) / std::max<hsize_t>(std::max(k, set), 1));  // 16 MiB
  std::vector<float> values;
  std::vector<int32_t> ids;
  for (hsize_t first = begin; first < end; first += kBlock) {
    const hsize_t rows = std::min(kBlock, end - first);
    if (layout.token_logprobs) {
      values.resize(rows);
      read_rows(sets[Dataset::kTokenLogprobs], H5T_NATIVE_FLOAT, first, rows, 0, values.data());
      digest.logprobs.add(values.data(), sizeof(float) * rows);
    }
    if (k > 0) {
      ids.resize(rows * k);
      values.resize(rows * k);
      read_rows(sets[Dataset::kTopkIds], H5T_NATIVE_INT32, first, rows, k, ids.data());
      read_rows(sets[Dataset::kTopkLogprobs], H5T_NATIVE_FLOAT, first, rows, k, values.data());
      digest.topk_ids.add(ids.data(), sizeof(int32_t) * rows * k);
      digest.topk_logprobs.add(values.data(), sizeof(float) * rows * k);
    }
    if (set > 0) {
      values.resize(rows * set);
      read_rows(sets[Dataset::kTokenSetLogprobs], H5T_NATIVE_FLOAT, first, rows, set, values.data());
      digest.set_logprobs.add(values.data(), sizeof(float) * rows * set);
    }
  }
  digest.with_set = set > 0;
  if (layout.token_logprobs) {
    read_row(sets[Dataset::kNllSum], H5T_NATIVE_DOUBLE, p, 0, &digest.nll_sum);
    read_row(sets[Dataset::kPerplexity], H5T_NATIVE_DOUBLE, p, 0, &digest.perplexity);
  }
  digest.with_greedy = layout.is_greedy();
  if (digest.with_greedy) read_row(sets[Dataset::kIsGreedy], H5T_NATIVE_UCHAR, p, 0, &digest.is_greedy);
  return digest;
}

// The inspection proper, in the child: returns {"identity", "completed", "torn"} as JSON.
std::string inspect_in_child(const std::string& path, const OutputLayout& layout, const nlohmann::json& expected) {
  quiet_hdf5_errors();
  if (H5Fis_hdf5(path.c_str()) <= 0) throw UserError(path + " is not an HDF5 file");
  const H5Handle access = unlocked_file_access();  // the parent holds our own flock on it
  H5Handle file{H5Fopen(path.c_str(), H5F_ACC_RDONLY, access.id), H5Fclose};
  if (file.id < 0) throw UserError(path + " cannot be opened as HDF5 (damaged?)");
  if (H5Aexists(file.id, "resume_identity") <= 0)
    throw UserError(path + " has no resume_identity: not a pipefill output");
  const std::optional<std::string> identity_text = read_string_attribute(file.id, "resume_identity");
  if (!identity_text) throw UserError(path + ": resume_identity is not a readable string");
  const nlohmann::json identity = nlohmann::json::parse(*identity_text, nullptr, false);
  if (identity.is_discarded() || !identity.is_object()) throw UserError(path + ": resume_identity is not JSON");
  // The identity first: "another input" says more than the shape that follows from it.
  if (auto difference = identity_difference(identity, expected))
    throw UserError(path + " was written with another " + *difference);

  OpenDatasets sets;
  for (const DatasetSpec& spec : output_datasets()) {
    if (!held_while_partial(spec, layout)) continue;
    // One the format gained after the file was begun is added on reopening (ResultWriter).
    if (spec.added_later && H5Lexists(file.id, spec.name, H5P_DEFAULT) <= 0) continue;
    sets.sets[static_cast<size_t>(spec.id)] = open_checked(file.id, path, spec, layout);
  }
  const hsize_t n = static_cast<hsize_t>(layout.num_prompts), vocab = static_cast<hsize_t>(layout.vocab_size);
  const hsize_t hidden = static_cast<hsize_t>(layout.hidden_size);
  std::vector<unsigned char> completed(n);
  if (H5Dread(sets[Dataset::kCompleted], H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, completed.data()) < 0)
    throw UserError(path + ": the completion flags cannot be read");
  nlohmann::json done = nlohmann::json::array(), torn = nlohmann::json::array(), stale = nlohmann::json::array();
  std::vector<float> row(layout.with_logits ? vocab : 0), hidden_row(hidden);
  // A file begun before /is_greedy existed never stored its rows' flag: they are computed again.
  const bool greedy_missing = layout.is_greedy() && sets[Dataset::kIsGreedy] < 0;
  for (hsize_t p = 0; p < n; ++p) {
    if (completed[p] != 1) continue;
    if (greedy_missing) {
      stale.push_back(static_cast<int>(p));
      continue;
    }
    double ttft = 0;
    uint64_t stored = 0;
    read_row(sets[Dataset::kTtft], H5T_NATIVE_DOUBLE, p, 0, &ttft);
    read_row(sets[Dataset::kRowChecksum], H5T_NATIVE_UINT64, p, 0, &stored);
    if (layout.with_logits) read_row(sets[Dataset::kLogits], H5T_NATIVE_FLOAT, p, vocab, row.data());
    if (hidden > 0) read_row(sets[Dataset::kHiddenStates], H5T_NATIVE_FLOAT, p, hidden, hidden_row.data());
    TokenRowsDigest digest;
    if (layout.token_rows()) digest = digest_token_rows(sets, layout, p);
    (row_checksum(row.data(), layout.with_logits ? layout.vocab_size : 0, hidden_row.data(), layout.hidden_size, ttft,
                  layout.token_rows() ? &digest : nullptr) == stored
         ? done
         : torn)
        .push_back(static_cast<int>(p));
  }
  return nlohmann::json{{"completed", done}, {"torn", torn}, {"stale", stale}}.dump();
}

}  // namespace

StoredOutput inspect_output(const std::string& path, const OutputLayout& layout, const nlohmann::json& identity,
                            double timeout_s) {
  require_regular_file(path, "output");
  const nlohmann::json found =
      nlohmann::json::parse(run_isolated(path, timeout_s, [&] { return inspect_in_child(path, layout, identity); }));
  StoredOutput stored;
  stored.completed.assign(layout.num_prompts, 0);
  for (int p : found["completed"]) stored.completed[p] = 1;
  for (int p : found["torn"]) stored.torn_rows.push_back(p);
  for (int p : found["stale"]) stored.stale_rows.push_back(p);
  return stored;
}

nlohmann::json compared_identity(nlohmann::json identity) {
  if (!identity.is_object()) return identity;
  if (identity.contains("input_fingerprint")) identity.erase("input");
  if (identity.contains("weights_fingerprint")) identity.erase("model");
  return identity;
}

std::optional<std::string> identity_difference(const nlohmann::json& stored_identity,
                                               const nlohmann::json& current_identity) {
  const nlohmann::json stored = compared_identity(stored_identity), current = compared_identity(current_identity);
  for (auto& [key, value] : current.items())
    if (!stored.is_object() || !stored.contains(key) || stored[key] != value)
      return key + " (" + (stored.is_object() && stored.contains(key) ? stored[key].dump() : std::string("none")) +
             ", this run: " + value.dump() + ")";
  // A key only the stored identity has: an option that enters the identity only when given
  // (cli/option_table.hpp, kOnlyWhenSet) was given then and not now. The layout left the
  // identity (any layout resumes any output): outputs written before still hold it.
  for (auto& [key, value] : stored.items())
    if (!current.contains(key) && key != "pp" && key != "tp" && key != "layer_partition")
      return key + " (" + value.dump() + ", this run: none)";
  return std::nullopt;
}

uint64_t row_checksum(const float* row, int vocab_size, const float* hidden_row, int hidden_size, double ttft_s,
                      const TokenRowsDigest* token_rows) {
  Fnv1a hash;
  hash.add(row, vocab_size > 0 ? sizeof(float) * vocab_size : 0);
  hash.add(hidden_row, hidden_size > 0 ? sizeof(float) * hidden_size : 0);
  if (token_rows)
    hash.add_value(token_rows->logprobs.value)
        .add_value(token_rows->topk_ids.value)
        .add_value(token_rows->topk_logprobs.value)
        .add_value(token_rows->nll_sum)
        .add_value(token_rows->perplexity);
  if (token_rows && token_rows->with_greedy) hash.add_value(token_rows->is_greedy);
  if (token_rows && token_rows->with_set) hash.add_value(token_rows->set_logprobs.value);
  return hash.add_value(ttft_s).value;
}

}  // namespace pf::io
