// Progress of a long run, printed by world rank 0 at a steady interval: prompts done,
// tokens through stage 0, throughput and an ETA. Plain lines (Slurm logs, files, anything
// launched by mpirun or srun); a live bar redrawn in place on a terminal when run without a
// launcher, or when PIPEFILL_PROGRESS=bar.
#pragma once

#include <cstdint>
#include <cstdio>

namespace pf::pipeline {

class ProgressReporter {
 public:
  // interval_s <= 0 turns it off.
  ProgressReporter(double interval_s, int64_t total_tokens, int total_prompts, std::FILE* out = stdout);
  // Called between micro-batches: tokens stage 0 has computed, prompts whose logits arrived.
  void update(int64_t tokens_done, int prompts_done);
  void finish();  // ends a live bar's line

 private:
  void print(int64_t tokens_done, int prompts_done, double now);
  double interval_s_;
  int64_t total_tokens_;
  int total_prompts_;
  std::FILE* out_;
  bool live_;
  double start_s_;
  double last_print_s_;
  bool printed_ = false;
};

}  // namespace pf::pipeline
