// The output file, owned by world rank 0. It is written to "<output>.partial" as prompts
// complete, under an exclusive lock (io/output_lock.hpp). Every per-prompt dataset is
// contiguous and allocated when the file is created, so a prompt's write touches only its
// own bytes and never HDF5's metadata. A prompt is stored in two flushed steps: its row,
// TTFT and row checksum, then its completion flag; a kill at any instant leaves at worst a
// row without its flag, and a flag whose row fails its checksum (a torn write the OS did not
// order) is caught on resume and recomputed. The run's identity (model and weights
// fingerprints, input fingerprint, configuration) is stored at creation; `--resume` reopens a
// partial file, or accepts a complete one, only if the identity, layout and checksums match.
// Both are inspected in a forked child first (io/isolated_call.hpp): a damaged file cannot
// crash the job. When every prompt is done, the timeline and the attributes are written and
// the file is renamed to <output>: a file under the final name is complete.
#pragma once

#include <hdf5.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "io/h5_handle.hpp"
#include "io/output_format.hpp"
#include "io/output_lock.hpp"
#include "io/stored_output.hpp"
#include "trace/timeline_event.hpp"

namespace pf::io {

class ResultWriter {
 public:
  // Locks and creates "<path>.partial" (UserError if another run holds it, or it cannot be
  // written), or, with `resume` and a non-empty partial file, reopens it after checking its
  // layout, `identity` (UserError naming the first difference) and every completed row's
  // checksum (rows that fail are recomputed). `timeout_s` bounds the inspection (0: none).
  // `disposable`: a study's file (simulate --timeline), whose partial file is removed unless
  // finish() renamed it (a failed write, a full disk): nothing resumes it.
  ResultWriter(const std::string& path, const OutputLayout& layout, const nlohmann::json& identity, bool resume,
               double timeout_s, bool disposable = false);
  // A partial file that holds finished prompts is kept (for --resume); an empty one is removed.
  ~ResultWriter();
  ResultWriter(const ResultWriter&) = delete;
  ResultWriter& operator=(const ResultWriter&) = delete;

  // Prompts already finished in the reopened file (all false for a new file).
  const std::vector<char>& completed() const { return completed_; }
  int completed_count() const;
  bool resumed() const { return resumed_; }

  // With token_logprobs, over the prompts stored by this run: their tokens that have a
  // log-prob (all but each prompt's first) and the sum of their NLL (the run's perplexity).
  // Of the prompts finished by this run (a resumed prompt's rows before its checkpoint included).
  int written_this_run() const { return written_this_run_; }
  int64_t scored_tokens() const { return scored_tokens_; }
  double scored_nll_sum() const { return scored_nll_sum_; }

  // Prompts a resumed file marked complete whose rows failed their checksum, or that an
  // earlier version stored without a dataset this layout has (stale_rows): recomputed.
  const std::vector<int>& torn_rows() const { return torn_rows_; }
  const std::vector<int>& stale_rows() const { return stale_rows_; }
  // Marks finished prompts as not done (flags cleared and flushed): something they need
  // besides their rows is missing (a KV export file), so they are computed again.
  void recompute(const std::vector<int>& prompts);

  // Stores token rows [start, start + count) of `prompt` (layouts with token rows; the arrays
  // the layout's row_shape() has, io/token_rows.hpp). A prompt's rows come in order, from
  // position 0, before its write_prompt; they are not flushed on their own (write_prompt's
  // flushes order them before the prompt's flag).
  void write_token_rows(int prompt, int64_t start, int count, const TokenRowsIn& rows);
  // Reads back token rows [start, start + count) of `prompt` that this run wrote (prefix
  // reuse copies a source prompt's rows).
  void read_token_rows(int prompt, int64_t start, int count, const TokenRowsOut& rows) const;
  // Stores one prompt's logits (nullptr without logits), hidden-state row (read only when
  // the layout has one), its perplexity and NLL (from its token rows, with token_logprobs),
  // TTFT, the tokens it reused or restored instead of computing and checksum, flushes,
  // then marks it complete and flushes again.
  void write_prompt(int prompt, const float* row, const float* hidden_row, double ttft_s, int64_t reused_tokens = 0,
                    int64_t restored_tokens = 0);

  // Checkpoints inside a prompt (pipeline/checkpoint_run.hpp). The digest of the open
  // prompt's token rows [0, position) when its rows reached exactly `position` (a chunk
  // boundary), if they did in this run.
  std::optional<TokenRowsDigest> digest_at(int prompt, int64_t position) const;
  // A resumed run: the file's rows [0, rows) of `prompt` (an interrupted run's) are read back;
  // if their digest is `expected`, the prompt is open again at `rows` (its next rows continue
  // it) and the result says whether they are all finite; nullopt when they differ.
  struct ContinuedRows {
    bool finite = true;
  };
  std::optional<ContinuedRows> continue_prompt(int prompt, int64_t rows, const TokenRowsDigest& expected);
  // The prompt whose token rows are being stored (-1: none yet) and how many it has.
  int open_prompt() const { return open_.prompt; }
  int64_t open_rows() const { return open_.next; }
  const OutputLayout& layout() const { return layout_; }
  // Everything written so far reaches the disk (fsync: a checkpoint's token rows).
  void flush();
  // The partial file is kept when the run ends even if no prompt is complete: a checkpoint
  // needs its token rows.
  void keep_partial() { keep_partial_ = true; }
  // If every prompt is complete: writes /timeline (this run's events) and the root
  // attributes, closes and renames into place, returns true. Otherwise (a stopped run) the
  // partial file stays as its rows left it, for --resume, and it returns false.
  bool finish(const std::vector<trace::TimelineEvent>& timeline, const nlohmann::json& attributes);

 private:
  void create(const nlohmann::json& identity);
  void reopen();

  std::string path_;
  std::string temporary_path_;
  OutputLayout layout_;
  bool resumed_ = false;
  std::unique_ptr<OutputLock> lock_;
  void close_datasets();
  hid_t set_of(Dataset id) const { return sets_[static_cast<size_t>(id)].id; }

  H5Handle file_;
  std::array<H5Handle, kNumDatasets> sets_;  // the layout's datasets, by Dataset (output_format.hpp)
  // The prompt whose token rows are being written, and what its checksum needs of them.
  struct OpenPrompt {
    int prompt = -1;
    int64_t next = 0;  // its next position to write
    TokenRowsDigest digest;
    std::map<int64_t, TokenRowsDigest> at_boundary;  // the digest each time its rows ended at a position
  } open_;
  bool keep_partial_ = false;
  bool disposable_ = false;
  bool finished_ = false;  // renamed into place
  std::vector<char> completed_;
  std::vector<int> torn_rows_;  // stale rows included
  std::vector<int> stale_rows_;
  int written_this_run_ = 0;
  int64_t scored_tokens_ = 0;
  double scored_nll_sum_ = 0;
};

// --resume on an existing <path>: true if it is this run's complete output (identity, layout
// and every row's checksum verified, in a forked child); UserError if it is anything else
// (another model or input, a damaged file, not an output). False if there is no such file.
bool verified_complete_output(const std::string& path, const OutputLayout& layout, const nlohmann::json& identity,
                              double timeout_s);

}  // namespace pf::io
