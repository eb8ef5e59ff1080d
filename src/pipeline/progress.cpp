// Progress lines (see progress.hpp).
#include "pipeline/progress.hpp"

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "dist/clock_sync.hpp"

namespace pf::pipeline {
namespace {

std::string duration_text(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "?";
  const long s = static_cast<long>(seconds + 0.5);
  char text[32];
  if (s >= 3600) std::snprintf(text, sizeof text, "%ldh%02ldm", s / 3600, (s / 60) % 60);
  else if (s >= 60) std::snprintf(text, sizeof text, "%ldm%02lds", s / 60, s % 60);
  else std::snprintf(text, sizeof text, "%lds", s);
  return text;
}

// A live bar only on a real terminal. Under mpirun the rank's stdout is a pseudo-terminal
// even when mpirun's own output goes to a file, so launched ranks print lines unless
// PIPEFILL_PROGRESS=bar asks for the bar; PIPEFILL_PROGRESS=lines forces lines anywhere.
bool use_live_bar(std::FILE* out) {
  const char* choice = std::getenv("PIPEFILL_PROGRESS");
  if (choice && std::string(choice) == "bar") return true;
  if (choice && std::string(choice) == "lines") return false;
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("SLURM_JOB_ID");
  return !launched && isatty(fileno(out)) != 0;
}

}  // namespace

ProgressReporter::ProgressReporter(double interval_s, int64_t total_tokens, int total_prompts, std::FILE* out)
    : interval_s_(interval_s),
      total_tokens_(total_tokens),
      total_prompts_(total_prompts),
      out_(out),
      live_(use_live_bar(out)),
      start_s_(dist::steady_seconds()),
      last_print_s_(start_s_) {}

void ProgressReporter::update(int64_t tokens_done, int prompts_done) {
  if (interval_s_ <= 0) return;
  const double now = dist::steady_seconds();
  if (now - last_print_s_ < interval_s_) return;
  last_print_s_ = now;
  print(tokens_done, prompts_done, now);
}

void ProgressReporter::print(int64_t tokens_done, int prompts_done, double now) {
  const double elapsed = now - start_s_;
  const double fraction = total_tokens_ > 0 ? static_cast<double>(tokens_done) / total_tokens_ : 1.0;
  const double rate = elapsed > 0 ? tokens_done / elapsed : 0;
  const double eta = rate > 0 ? (total_tokens_ - tokens_done) / rate : -1;
  if (live_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(fraction * kWidth);
    std::fprintf(out_, "\r[%s%s] %5.1f%% | prompts %d/%d | %.0f tokens/s | ETA %s   ",
                 std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(), 100 * fraction,
                 prompts_done, total_prompts_, rate, duration_text(eta).c_str());
  } else {
    std::fprintf(out_, "progress: %5.1f%% of tokens through stage 0, prompts %d/%d done, %.0f tokens/s, elapsed %s, ETA %s\n",
                 100 * fraction, prompts_done, total_prompts_, rate, duration_text(elapsed).c_str(),
                 duration_text(eta).c_str());
  }
  std::fflush(out_);
  printed_ = true;
}

void ProgressReporter::finish() {
  if (printed_ && live_) std::fprintf(out_, "\n");
}

}  // namespace pf::pipeline
