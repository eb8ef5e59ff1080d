// What a study command may write over. make-prompts, simulate --timeline and advise --plot
// replace their output as a compiler's -o does, but only a file of the kind they write:
// a mistyped path never replaces a run's results, a model's files or anything else.
#pragma once

#include <string>

namespace pf::io {

enum class StudyFile {
  kPromptFile,         // make-prompts: an HDF5 input (tokens, offsets), not a run's output
  kSimulatedTimeline,  // simulate --timeline: an output file written by simulate
  kPng,                // advise --plot
};

// UserError when `path` exists and is not of `kind` (checked in a child process: a damaged
// HDF5 file can crash libhdf5, io/isolated_call.hpp). An absent path passes.
void require_replaceable(const std::string& path, const std::string& role, StudyFile kind);

}  // namespace pf::io
