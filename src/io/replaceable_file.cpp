// Study outputs replace only their own kind of file (see replaceable_file.hpp).
#include "io/replaceable_file.hpp"

#include <hdf5.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "errors.hpp"
#include "io/h5_handle.hpp"
#include "io/isolated_call.hpp"
#include "io/prompts_h5.hpp"

namespace pf::io {
namespace {

// In the child: "not-hdf5", "damaged", "simulated" (simulate's timeline), "run" (a run's
// output, complete or partial), "prompts" (tokens and offsets) or "other".
std::string hdf5_kind(const std::string& path) {
  quiet_hdf5_errors();
  if (H5Fis_hdf5(path.c_str()) <= 0) return "not-hdf5";
  H5Handle access{H5Pcreate(H5P_FILE_ACCESS), H5Pclose};
  H5Pset_file_locking(access.id, false, true);
  H5Handle file{H5Fopen(path.c_str(), H5F_ACC_RDONLY, access.id), H5Fclose};
  if (file.id < 0) return "damaged";
  if (H5Aexists(file.id, "resume_identity") > 0) {
    H5Handle attr{H5Aopen(file.id, "resume_identity", H5P_DEFAULT), H5Aclose};
    H5Handle type{H5Aget_type(attr.id), H5Tclose};
    std::string text;
    if (H5Tget_class(type.id) == H5T_STRING && H5Tis_variable_str(type.id) <= 0) {
      text.assign(H5Tget_size(type.id), '\0');
      if (H5Aread(attr.id, type.id, text.data()) < 0) text.clear();
    }
    const nlohmann::json identity = nlohmann::json::parse(text.c_str(), nullptr, false);
    const bool simulated = identity.is_object() && identity.value("simulated", false) == true;
    return simulated ? "simulated" : "run";
  }
  const bool prompts = H5Lexists(file.id, "tokens", H5P_DEFAULT) > 0 && H5Lexists(file.id, "offsets", H5P_DEFAULT) > 0;
  return prompts ? "prompts" : "other";
}

bool is_png(const std::string& path) {
  static const char kSignature[8] = {'\x89', 'P', 'N', 'G', '\r', '\n', '\x1a', '\n'};
  char head[8] = {};
  std::ifstream in(path, std::ios::binary);
  return in.read(head, sizeof head) && std::equal(head, head + 8, kSignature);
}

}  // namespace

void require_replaceable(const std::string& path, const std::string& role, StudyFile kind) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) return;  // absent (or refused elsewhere)
  const std::string keep = ": " + role + " does not replace it (move it aside, or choose another path)";
  if (kind == StudyFile::kPng) {
    if (!is_png(path)) throw UserError(path + " exists and is not a PNG image" + keep);
    return;
  }
  const std::string found = run_isolated("the file at " + role + " " + path, 30, [&] { return hdf5_kind(path); });
  const std::string wanted = kind == StudyFile::kPromptFile ? "prompts" : "simulated";
  if (found == wanted) return;
  if (found == "run") throw UserError(path + " is a pipefill run's output" + keep);
  if (found == "not-hdf5") throw UserError(path + " exists and is not an HDF5 file" + keep);
  throw UserError(path + " exists and is " +
                  (found == "damaged"     ? "a damaged HDF5 file"
                   : found == "prompts"   ? "a prompt file"
                   : found == "simulated" ? "a simulated timeline"
                                          : "an HDF5 file of another kind") +
                  keep);
}

}  // namespace pf::io
