// What a study command may write over. make-prompts, simulate --timeline and advise --plot
// replace their output as a compiler's -o does, but only a file of the kind they write:
// a mistyped path never replaces a run's results, a model's files or anything else.
#pragma once

#include <string>

namespace pf::io {

enum class StudyFile {
  kPromptFile,         // make-prompts: a prompt file no other program wrote (kGeneratorAttribute)
  kSimulatedTimeline,  // simulate --timeline: an output file whose identity is kSimulatedKey
  kPng,                // advise --plot
};

// The key of simulate's timelines' resume_identity that tells them from a run's outputs.
constexpr const char* kSimulatedKey = "simulated";

// UserError when `path` exists and is not of `kind`, or when `path`.partial is a stopped
// run's resumable output (hours of rows; the study would truncate it). Checked in a child
// process: a damaged HDF5 file can crash libhdf5 (io/isolated_call.hpp). An absent path passes.
void require_replaceable(const std::string& path, const std::string& role, StudyFile kind);

}  // namespace pf::io
