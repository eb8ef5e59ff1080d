// The emulate backend: a stage whose compute is a sleep of the time its cost model
// predicts for that chunk after that prefix (and for the LM head). Everything around it
// stays real: MPI, the schedule, the ring of buffers, sends of the real byte sizes (the
// float32 hidden states the cuda backend sends: dist/activation_wire.hpp), the
// timeline. Sleeping ranks use no CPU, so 8-32 ranks run honestly on a 2-core machine. The
// logits it produces are zeros.
#pragma once

#include <functional>

#include "compute/stage_compute.hpp"
#include "sim/stage_costs.hpp"

namespace pf::compute {

class EmulatedStageCompute final : public StageCompute {
 public:
  // `capacity_tokens`: what a profile may use (no memory is held; it only bounds the grid).
  EmulatedStageCompute(const sim::StageCost& cost, int vocab_shard, int64_t capacity_tokens);
  // Called every millisecond while "computing": a GPU's copy engines move data during
  // compute, but MPI moves it only inside MPI calls, so the emulator drives MPI's progress
  // engine in its sleeps (otherwise every transfer would wait for the compute to end).
  void set_background_progress(std::function<void()> progress) { progress_ = std::move(progress); }

  void embed(const int32_t*, int, float*) override {}
  void forward(const ChunkContext& chunk, float* hidden) override;
  void lm_head(const float* hidden_row, float* logits_shard) override;
  int vocab_shard_size() const override { return vocab_shard_; }
  void finish_prompt(int) override {}
  void prepare_prefix(int, int64_t, int) override {}
  int64_t capacity_tokens() const override { return capacity_tokens_; }
  std::optional<double> modelled_seconds(const ChunkContext& chunk) const override {
    return cost_.chunk_seconds(static_cast<double>(chunk.pos0), chunk.tokens);
  }

 private:
  sim::StageCost cost_;
  int vocab_shard_;
  int64_t capacity_tokens_;
  std::function<void()> progress_;
  void sleep_with_progress(double seconds) const;
};

// Sleeps until `seconds` from now (absolute deadline: immune to early wake-ups).
void sleep_for_seconds(double seconds);

}  // namespace pf::compute
