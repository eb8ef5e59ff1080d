// The backend interface: what a pipeline stage asks of its compute. The stage loop, the
// profiler and the plan never know which backend runs: the CPU (float32, OpenBLAS), the
// emulator (sleeps of a cost model), CUDA (bf16, asynchronous on device streams).
//
// Hidden-state pointers are where the backend computes: host memory for cpu/emulate,
// device memory for cuda (the transport hands out buffers of the same kind).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <vector>

#include "compute/op_times.hpp"
#include "compute/vocab_scores.hpp"

namespace pf::compute {

struct ChunkContext {
  int prompt = 0;
  int64_t pos0 = 0;  // prefix already in the cache = position of the chunk's first token
  int tokens = 0;
  long long micro_batch = -1;  // for device-timed backends' timeline spans
  // Rows [first_output_row, tokens) of the hidden states are read after forward(); the
  // backend may leave the others' last layer undone (compute::OutputRows). 0: all of them.
  int first_output_row = 0;
};

// What a backend's context-parallel ring did so far: chunk-layers attended by each variant,
// and bytes this rank sent (zero without CP).
struct CpCounts {
  long long pass_kv_steps = 0, pass_q_steps = 0;
  int64_t bytes_sent = 0;
};

// A stretch of device time a backend measured itself (CUDA events), in run-clock seconds.
struct DeviceSpan {
  long long micro_batch = -1;
  double start_s = 0, end_s = 0;
};

class StageCompute {
 public:
  virtual ~StageCompute() = default;

  // hidden[t, :] = embedding[tokens[t], :] (stage 0).
  virtual void embed(const int32_t* tokens, int count, float* hidden) = 0;
  // Every local layer on hidden [tokens, H] in place; appends the chunk's K/V. With TP, the
  // row-parallel partial sums go through the dist::TpAllReduce the backend was built with.
  virtual void forward(const ChunkContext& chunk, float* hidden) = 0;
  // Final norm + this rank's vocabulary shard of the LM head on one hidden row (last stage).
  virtual void lm_head(const float* hidden_row, float* logits_shard) = 0;
  virtual int vocab_shard_size() const = 0;
  // The final norm alone (what lm_head applies first; Hugging Face's last_hidden_state) on
  // `rows` hidden rows, into host memory `normed` [rows, H] (last stage, --hidden-states).
  // Backends that do not implement it refuse --hidden-states when options are parsed.
  virtual void final_norm(const float* /*hidden*/, int /*rows*/, float* /*normed*/) {
    throw std::logic_error("final_norm: this backend does not compute hidden states (--hidden-states)");
  }
  // Final norm + this rank's vocabulary shard of the LM head on `rows` hidden rows, each row's
  // logits summarized where they were computed (compute/vocab_scores.hpp) into host memory
  // `records` [rows] of row_summary_bytes(shape): targets [rows] is the token whose logit each
  // row keeps (a global id, -1: none), `shape` its top-k and token set (host memory). Only the
  // summaries reach the host, never a row's logits (last stage, --logprobs / --top-k /
  // --token-ids). Backends that do not implement it refuse those options when options are parsed.
  virtual void summarize_vocab_rows(const float* /*hidden*/, int /*rows*/, const int32_t* /*targets*/,
                                    const SummaryShape& /*shape*/, std::byte* /*records*/) {
    throw std::logic_error("summarize_vocab_rows: this backend does not score tokens (--logprobs, --top-k)");
  }
  // The K and V of positions [pos0, pos0 + count) of `prompt` in every local layer, copied into
  // host memory: keys and values each [layers][kv_heads][count][head_dim], K as attention used
  // it (after RoPE and q/k norm). A latent cache (MLA: kv_heads 1, head_dim the latent's width)
  // has one row per token: it goes into `keys`, and `values` is not touched (here and in
  // write_kv). Last call for a prompt before finish_prompt (run --save-kv).
  // Backends that do not implement it refuse --save-kv when options are parsed.
  virtual void read_kv(int /*prompt*/, int64_t /*pos0*/, int /*count*/, float* /*keys*/, float* /*values*/) const {
    throw std::logic_error("read_kv: this backend does not export its KV cache (--save-kv)");
  }
  // The inverse of read_kv: positions [pos0, pos0 + count) of `prompt` in every local layer
  // from host memory in read_kv's layout, into the prompt's KV pages (reserved as needed): a
  // prefix loaded from the KV store (run --kv-store) instead of computed. Backends that do
  // not implement it refuse --kv-store when options are parsed.
  virtual void write_kv(int /*prompt*/, int64_t /*pos0*/, int /*count*/, const float* /*keys*/,
                        const float* /*values*/) {
    throw std::logic_error("write_kv: this backend does not load KV caches (--kv-store)");
  }
  // Prefix reuse: `dest`, a later prompt that starts with the same `tokens` tokens (a
  // multiple of the page size), takes over those KV pages of `source`, whose last chunk has
  // just passed this stage; it is called before finish_prompt(source). Backends without a KV
  // cache (emulate) have nothing to share.
  virtual void share_prefix(int /*source*/, int /*dest*/, int64_t /*tokens*/) {}
  // The prompt's last chunk has passed this stage: free what it held (KV pages).
  virtual void finish_prompt(int prompt) = 0;
  // MoE models: rows the router sent to each expert so far, [local layers][experts] (dense
  // layers count none); empty where the backend does not count (trace/expert_load.hpp).
  virtual std::vector<int64_t> expert_rows() const { return {}; }
  // Context parallelism: what the ring did so far (all zero without CP).
  virtual CpCounts cp_counts() const { return {}; }
  // Context parallelism, the last stage: the chunk [start, start + length)'s last `rows`
  // rows, the ones its results read (each rank's `state` holds its share, sched::cp_share),
  // gathered from the CP ranks that hold them into the front of CP rank 0's `state`, in
  // position order. Collective over the CP group.
  virtual void gather_cp_rows(float* /*state*/, int64_t /*start*/, int /*length*/, int /*rows*/) {
    throw std::logic_error("gather_cp_rows: this backend does not run --cp");
  }
  // Where forward()'s time went so far, by kind of op; all zero where not measured (only the
  // cpu backend times its ops: trace/op_times.hpp).
  virtual OpTimes op_times() const { return {}; }

  // Profiling support. Makes `prefix` tokens of `prompt` look computed (K/V present) so a
  // chunk after them can be timed; returns how many tokens (prefix + chunk) the stage can hold.
  virtual void prepare_prefix(int prompt, int64_t prefix, int tokens) = 0;
  virtual int64_t capacity_tokens() const = 0;
  // A backend whose cost is a model (emulate) answers here instead of being timed.
  virtual std::optional<double> modelled_seconds(const ChunkContext&) const { return std::nullopt; }

  // Asynchronous backends (cuda) return from embed/forward before the work is done.
  // synchronize() waits for all of it (the profiler times forwards with it).
  virtual void synchronize() {}
  // Device-timed backends: align their clock with the run clock (`host_now_s` is now), then
  // report finished forwards; the stage loop puts them on the timeline as compute.
  virtual bool timed_on_device() const { return false; }
  virtual void align_clock(double /*host_now_s*/) {}
  virtual void take_finished_spans(std::vector<DeviceSpan>& /*out*/, bool /*wait_for_all*/) {}
  // The profiler's random hidden states, where forward() can read them: the host vector
  // itself, or (device backends) a device copy of it.
  virtual float* profiling_hidden(std::vector<float>& host) { return host.data(); }
};

}  // namespace pf::compute
