// The output file, owned by world rank 0. It is written to "<output>.partial" as prompts
// complete: a logits row, its completion flag in /completed, then a flush, so a job that is
// killed keeps every prompt it finished. The run's identity (model, input fingerprint,
// configuration) is stored when the file is created; `--resume` reopens a partial file only
// if it matches. When every prompt is done, TTFT, the timeline and the attributes are
// written and the file is renamed to <output>: a file under the final name is complete.
#pragma once

#include <hdf5.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "trace/timeline.hpp"

namespace pf::io {

class ResultWriter {
 public:
  // Creates "<path>.partial" (UserError if it cannot: missing directory, permissions), or,
  // with `resume` and an existing partial file, reopens it after checking `identity`
  // against the one stored in it (UserError naming the first difference). Without logits
  // (the emulate backend computes none) there is no /logits dataset.
  ResultWriter(const std::string& path, int num_prompts, int vocab_size, bool with_logits,
               const nlohmann::json& identity, bool resume = false);
  // A partial file that holds finished prompts is kept (for --resume); an empty one is removed.
  ~ResultWriter();
  ResultWriter(const ResultWriter&) = delete;
  ResultWriter& operator=(const ResultWriter&) = delete;

  // Prompts already finished in the reopened file (all false for a new file).
  const std::vector<char>& completed() const { return completed_; }
  int completed_count() const;
  bool resumed() const { return resumed_; }

  // Stores one prompt's logits (nullptr without logits) and its TTFT, marks it complete, flushes.
  void write_logits(int prompt, const float* row, double ttft_s);
  // Writes /timeline (this run's events) and the root attributes. If every prompt is
  // complete: closes and renames into place, returns true. Otherwise (a stopped run) the
  // partial file stays, flushed, for --resume, and it returns false.
  bool finish(const std::vector<trace::TimelineEvent>& timeline, const nlohmann::json& attributes);

 private:
  std::string path_;
  std::string temporary_path_;
  int vocab_size_;
  bool with_logits_;
  bool resumed_ = false;
  hid_t file_ = -1;
  hid_t logits_ = -1;
  hid_t completed_set_ = -1;
  hid_t ttft_set_ = -1;
  std::vector<char> completed_;
  int written_this_run_ = 0;
};

// Whether a finished output already exists under `path` (then --resume has nothing to do).
bool output_complete(const std::string& path);

}  // namespace pf::io
