// Study outputs replace only their own kind of file (see replaceable_file.hpp).
#include "io/replaceable_file.hpp"

#include <hdf5.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "errors.hpp"
#include "io/h5_attributes.hpp"
#include "io/h5_handle.hpp"
#include "io/isolated_call.hpp"
#include "io/prompts_h5.hpp"

namespace pf::io {
namespace {

// In the child: "not-hdf5", "damaged", "simulated" (simulate's timeline), "run" (a run's
// output, complete or partial), "make-prompts" (a prompt file it wrote), "prompts" (another's:
// a tokenized corpus) or "other".
std::string hdf5_kind(const std::string& path) {
  quiet_hdf5_errors();
  if (H5Fis_hdf5(path.c_str()) <= 0) return "not-hdf5";
  const H5Handle access = unlocked_file_access();
  const H5Handle file{H5Fopen(path.c_str(), H5F_ACC_RDONLY, access.id), H5Fclose};
  if (file.id < 0) return "damaged";
  if (H5Aexists(file.id, "resume_identity") > 0) {
    const nlohmann::json identity =
        nlohmann::json::parse(read_string_attribute(file.id, "resume_identity").value_or(""), nullptr, false);
    const bool simulated = identity.is_object() && identity.value(kSimulatedKey, false) == true;
    return simulated ? "simulated" : "run";
  }
  if (H5Lexists(file.id, "tokens", H5P_DEFAULT) <= 0 || H5Lexists(file.id, "offsets", H5P_DEFAULT) <= 0) return "other";
  const std::string generator = read_string_attribute(file.id, kGeneratorAttribute).value_or("");
  return generator.empty() || generator == kMakePromptsGenerator ? "make-prompts" : "prompts";
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
  const std::string keep = ": " + role + " does not replace it (move it aside, or choose another path)";
  if (kind == StudyFile::kPng) {
    if (std::filesystem::is_regular_file(path, error) && !is_png(path))
      throw UserError(path + " exists and is not a PNG image" + keep);
    return;
  }
  const std::string wanted = kind == StudyFile::kPromptFile ? "make-prompts" : "simulated";
  auto kind_of = [&](const std::string& file) {
    return run_isolated("the file at " + role + " " + file, 30, [&] { return hdf5_kind(file); });
  };
  // The partial file first: a stopped run's, resumable, is worth more than a finished output.
  const std::string partial = path + ".partial";
  if (std::filesystem::is_regular_file(partial, error) && std::filesystem::file_size(partial, error) > 0) {
    const std::string found = kind_of(partial);
    if (found == "run")
      throw UserError(partial + " is a pipefill run's partial output (a running run's, or a stopped one's that " +
                      "--resume continues)" + keep);
  }
  if (!std::filesystem::is_regular_file(path, error)) return;  // absent (or refused elsewhere)
  const std::string found = kind_of(path);
  if (found == wanted) return;
  if (found == "run") throw UserError(path + " is a pipefill run's output" + keep);
  if (found == "not-hdf5") throw UserError(path + " exists and is not an HDF5 file" + keep);
  throw UserError(path + " exists and is " +
                  (found == "damaged"        ? "a damaged HDF5 file"
                   : found == "make-prompts" ? "a prompt file of make-prompts"
                   : found == "prompts"      ? "a prompt file another program wrote (a tokenized corpus)"
                   : found == "simulated"    ? "a simulated timeline"
                                             : "an HDF5 file of another kind") +
                  keep);
}

}  // namespace pf::io
