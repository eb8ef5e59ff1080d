// One pipeline stage's compute on the CPU backend (float32, or bf16 storage with float32
// sums, OpenBLAS): embed (stage 0),
// the stage's decoder layers on one chunk, and the LM head (last stage). It owns the
// weights and a workspace, writes K/V into the stage's paged pool, and implements the ops
// of compute/decoder_layer.hpp, whose recipe runs each layer. The TP all-reduce is a
// dist::TpAllReduce it is given, so it stays MPI-free itself (benchmarks run it in one
// process); so is the context-parallel ring (dist::CpRing): with one, a chunk's rows here
// are this CP rank's share of it (sched/context_split.hpp), its K/V are this rank's shard of
// the prompt's cache, and attention reaches the other shards by ring_attention.hpp.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "compute/cpu/attention.hpp"
#include "compute/cpu/latent_attention.hpp"
#include "compute/cpu/moe.hpp"
#include "compute/cpu/ring_attention.hpp"
#include "compute/decoder_layer.hpp"
#include "compute/stage_compute.hpp"
#include "dist/cp_ring.hpp"
#include "dist/tp_all_reduce.hpp"
#include "kvcache/paged_kv_pool.hpp"
#include "model/config.hpp"
#include "model/weights.hpp"

namespace pf::compute {

class CpuStageCompute final : public StageCompute {
 public:
  // `all_reduce` sums the row-parallel partial results (o, down) across the TP group: null
  // when tp == 1, else it must outlive this. A bf16 `kv_pool` (--dtype bf16, dense models)
  // makes the whole stage bf16: the weights are stored as bf16 (the float copies released),
  // every GEMM input and attention's Q and P are rounded to bf16 where the cuda backend
  // rounds them, and every sum stays float32. `cp_ring` (null when cp == 1; else it must
  // outlive this): the stage's CP group, attending by `cp_attention` (per chunk when auto).
  CpuStageCompute(const model::ModelConfig& config, const model::ShardSpec& shard, model::StageWeights weights,
                  kv::PagedKvPool& kv_pool, dist::TpAllReduce* all_reduce = nullptr, dist::CpRing* cp_ring = nullptr,
                  sched::CpAttention cp_attention = sched::CpAttention::kAuto);

  void embed(const int32_t* tokens, int count, float* hidden) override;
  void forward(const ChunkContext& chunk, float* hidden) override;
  void lm_head(const float* hidden_row, float* logits_shard) override;
  int vocab_shard_size() const override { return shard_.vocab_count; }
  void final_norm(const float* hidden, int rows, float* normed) override;
  void summarize_vocab_rows(const float* hidden, int rows, const int32_t* targets, const SummaryShape& shape,
                            std::byte* records) override;
  void read_kv(int prompt, int64_t pos0, int count, float* keys, float* values) const override;
  void write_kv(int prompt, int64_t pos0, int count, const float* keys, const float* values) override;
  void share_prefix(int source, int dest, int64_t tokens) override;
  void finish_prompt(int prompt) override {
    kv_pool_.release(prompt);
    cp_rows_.erase(prompt);
  }
  CpCounts cp_counts() const override { return cp_counts_; }
  void gather_cp_rows(float* state, int64_t start, int length, int rows) override;
  std::vector<int64_t> expert_rows() const override { return expert_rows_; }
  OpTimes op_times() const override { return op_times_; }
  // Fills the prefix's K/V with random values: attention's cost does not depend on them.
  void prepare_prefix(int prompt, int64_t prefix, int tokens) override;
  int64_t capacity_tokens() const override;

 private:
  class LayerOnCpu;  // the decoder-layer ops on one chunk (cpu_stage_compute.cpp)

  // bf16 storage of the large matrices (named as weight_of() in decoder_layer.hpp expects).
  struct Bf16Layer {
    std::vector<uint16_t> qkv, o, gate_up, down;
  };
  void store_weights_as_bf16();
  void read_kv_of_cp_group(int prompt, int64_t pos0, int count, float* keys, float* values) const;
  void write_kv_share(int prompt, int64_t pos0, int count, const float* keys, const float* values);
  void store_rows(int prompt, int64_t row0, int count, const float* keys, const float* values);
  sched::CpWidths cp_widths() const;  // what the CP ring moves a token
  // The first `rows` rows of `prompt`'s cache filled with random values, room for `room`.
  void fill_random_rows(int prompt, int64_t rows, int64_t room);
  bool bf16() const { return kv_pool_.bf16(); }

  model::ModelConfig config_;
  model::ShardSpec shard_;
  LayerShape shape_;
  LayerRecipe recipe_;
  model::StageWeights weights_;
  std::vector<Bf16Layer> bf16_layers_;                   // --dtype bf16 only
  std::vector<uint16_t> bf16_embedding_, bf16_lm_head_;  // (stage 0, the last stage)
  kv::PagedKvPool& kv_pool_;
  dist::TpAllReduce* all_reduce_;
  std::vector<double> inv_freq_;
  float rope_scale_;
  // Workspace, grown to the largest chunk seen.
  std::vector<float> normed_, qkv_, attn_, proj_, gate_up_, act_;
  std::vector<float> rope_cos_, rope_sin_;        // the chunk's rows' RoPE angles, shared by its layers
  std::vector<float> head_normed_, head_logits_;  // summarize_vocab_rows' final-norm rows and logits
  cpu::AttentionWorkspace attention_ws_;
  cpu::LatentWorkspace latent_ws_;  // MLA models
  cpu::MoeWorkspace moe_ws_;        // MoE models
  // Context parallelism: the ring, how it attends, and per prompt every CP rank's cached
  // rows (the runs of positions of its shares, in order).
  dist::CpRing* cp_ring_;
  sched::CpAttention cp_attention_;
  std::unordered_map<int, std::vector<std::vector<sched::RowRun>>> cp_rows_;
  cpu::RingWorkspace ring_ws_;
  CpCounts cp_counts_;
  std::vector<int64_t> expert_rows_;  // [local layers][experts]: rows routed so far
  OpTimes op_times_;
};

}  // namespace pf::compute
