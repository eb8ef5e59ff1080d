// Emulated stage compute (see the header).
#include "compute/emulate/emulated_stage_compute.hpp"

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "dist/activation_wire.hpp"

namespace pf::compute {

void sleep_for_seconds(double seconds) {
  if (seconds <= 0) return;
  timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  const long long nanos = deadline.tv_nsec + static_cast<long long>(seconds * 1e9);
  deadline.tv_sec += nanos / 1000000000LL;
  deadline.tv_nsec = nanos % 1000000000LL;
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nullptr) == EINTR) {
  }
}

// The transport carries floats: the wire format must be float32 for the messages to have
// the real sizes.
static_assert(dist::kActivationWireBytes == sizeof(float), "emulated messages are float32 hidden states");

EmulatedStageCompute::EmulatedStageCompute(const sim::StageCost& cost, int vocab_shard, int64_t capacity_tokens)
    : cost_(cost), vocab_shard_(vocab_shard), capacity_tokens_(capacity_tokens) {}

void EmulatedStageCompute::sleep_with_progress(double seconds) const {
  if (!progress_) return sleep_for_seconds(seconds);
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  const double deadline = now.tv_sec + now.tv_nsec * 1e-9 + seconds;
  for (;;) {
    progress_();
    clock_gettime(CLOCK_MONOTONIC, &now);
    const double left = deadline - (now.tv_sec + now.tv_nsec * 1e-9);
    if (left <= 0) return;
    sleep_for_seconds(std::min(left, 1e-3));
  }
}

void EmulatedStageCompute::forward(const ChunkContext& chunk, float*) {
  // The TP all-reduces are inside the modelled time (sim/stage_costs.cpp), not performed.
  sleep_with_progress(cost_.chunk_seconds(static_cast<double>(chunk.pos0), chunk.tokens));
}

void EmulatedStageCompute::lm_head(const float*, float* logits_shard) {
  sleep_with_progress(cost_.lm_head_s);
  std::fill(logits_shard, logits_shard + vocab_shard_, 0.0f);
}

}  // namespace pf::compute
