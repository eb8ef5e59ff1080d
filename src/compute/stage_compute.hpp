// The backend interface: what a pipeline stage asks of its compute. The stage loop, the
// profiler and the plan never know which backend runs: the CPU (float32, OpenBLAS), the
// emulator (sleeps of a cost model), later CUDA.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

namespace pf::compute {

struct ChunkContext {
  int prompt = 0;
  int64_t pos0 = 0;  // prefix already in the cache = position of the chunk's first token
  int tokens = 0;
};

// Sums `count` floats in place across the TP group (never called when tp == 1).
using AllReduce = std::function<void(float* data, int count)>;

class StageCompute {
 public:
  virtual ~StageCompute() = default;

  // hidden[t, :] = embedding[tokens[t], :] (stage 0).
  virtual void embed(const int32_t* tokens, int count, float* hidden) = 0;
  // Every local layer on hidden [tokens, H] in place; appends the chunk's K/V.
  virtual void forward(const ChunkContext& chunk, float* hidden, const AllReduce& all_reduce) = 0;
  // Final norm + this rank's vocabulary shard of the LM head on one hidden row (last stage).
  virtual void lm_head(const float* hidden_row, float* logits_shard) = 0;
  virtual int vocab_shard_size() const = 0;
  // The prompt's last chunk has passed this stage: free what it held (KV pages).
  virtual void finish_prompt(int prompt) = 0;

  // Profiling support. Makes `prefix` tokens of `prompt` look computed (K/V present) so a
  // chunk after them can be timed; returns how many tokens (prefix + chunk) the stage can hold.
  virtual void prepare_prefix(int prompt, int64_t prefix, int tokens) = 0;
  virtual int64_t capacity_tokens() const = 0;
  // A backend whose cost is a model (emulate) answers here instead of being timed.
  virtual std::optional<double> modelled_seconds(const ChunkContext&) const { return std::nullopt; }
  // Floats per token on the wire between stages (hidden states; emulate: bf16 sizes).
  virtual int payload_floats_per_token() const = 0;
};

}  // namespace pf::compute
