// The output file, owned by world rank 0. Logits rows are written as prompts complete;
// TTFT, the timeline and the run's configuration at the end. Everything goes to
// "<output>.partial" and is renamed to <output> only on success, so a failed run leaves
// no file that looks complete.
#pragma once

#include <hdf5.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trace/timeline.hpp"

namespace pf::io {

class ResultWriter {
 public:
  // Creates the temporary file; throws UserError if it cannot (missing directory, ...).
  // Without logits (the emulate backend computes none) there is no /logits dataset.
  ResultWriter(const std::string& path, int num_prompts, int vocab_size, bool with_logits = true);
  ~ResultWriter();  // unfinished: closes and deletes the temporary file
  ResultWriter(const ResultWriter&) = delete;
  ResultWriter& operator=(const ResultWriter&) = delete;

  void write_logits(int prompt, const float* row);
  // Writes /ttft_s, /timeline and the root attributes, closes, renames into place.
  void finish(const std::vector<double>& ttft_s, const std::vector<trace::TimelineEvent>& timeline,
              const nlohmann::json& attributes);

  const std::string& temporary_path() const { return temporary_path_; }

 private:
  std::string path_;
  std::string temporary_path_;
  int vocab_size_;
  bool with_logits_;
  hid_t file_ = -1;
  hid_t logits_ = -1;
  std::vector<char> written_;
};

}  // namespace pf::io
