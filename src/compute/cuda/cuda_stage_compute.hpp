// One pipeline stage's compute on a GPU: bf16 weights of this rank's layers and TP shard,
// a paged bf16 KV pool sized from the device memory left after weights and workspace,
// cuBLASLt GEMMs and the kernels of kernels/. Everything is enqueued on the forward stream
// and returns at once (the host prepares the next micro-batch while the GPU runs this
// one); the logits go device -> host on a separate copy stream. Each forward is bracketed
// by CUDA events, which is where the timeline's compute spans come from. The layer itself
// is the recipe of compute/decoder_layer.hpp over this class's ops; mixture-of-experts
// layers and multi-head latent attention run in MoeOnGpu and LatentOnGpu (an MoE layer
// waits once for its experts' row counts, see moe_on_gpu.hpp).
//
// MPI-free: the TP all-reduce is a dist::TpAllReduce (NCCL on the forward stream, or staged
// through host memory) built and owned by whoever builds the communicators.
#pragma once

#include <cuda_runtime.h>

#include <deque>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "compute/cuda/device_weights.hpp"
#include "compute/cuda/latent_on_gpu.hpp"
#include "compute/cuda/lt_gemm.hpp"
#include "compute/cuda/moe_on_gpu.hpp"
#include "compute/cuda/ring_on_gpu.hpp"
#include "compute/decoder_layer.hpp"
#include "compute/stage_compute.hpp"
#include "device/device_array.hpp"
#include "dist/cp_ring.hpp"
#include "dist/tp_all_reduce.hpp"
#include "kvcache/page_table.hpp"
#include "kvcache/paged_kv_pool.hpp"
#include "model/config.hpp"
#include "model/weights.hpp"
#include "sched/context_split.hpp"

namespace pf::cuda {

class CudaStageCompute final : public compute::StageCompute {
 public:
  // Takes the weights (already on the device) and reserves the workspace of a chunk of
  // `max_chunk_tokens` (it grows if a longer chunk ever comes). The KV pool comes later,
  // from allocate_kv(), once the caller has sized it from free_device_bytes().
  // `forward`: the stream everything is enqueued on, owned from here on (null: a new one);
  // a TP reducer built before this enqueues on it too. `all_reduce`: null when tp == 1,
  // else it must outlive this. `cp_ring` (device buffers, dist/device_cp_ring.hpp): null when
  // cp == 1, else it must outlive this; the stage's CP group, attending by `cp_attention`;
  // `host_cp_ring` the same group on host memory (the KV rows of --save-kv, --kv-store and
  // checkpoints gather there).
  CudaStageCompute(const model::ModelConfig& config, const model::ShardSpec& shard, DeviceWeights weights,
                   int page_size, int max_chunk_tokens, cudaStream_t forward = nullptr,
                   dist::TpAllReduce* all_reduce = nullptr, dist::CpRing* cp_ring = nullptr,
                   dist::CpRing* host_cp_ring = nullptr, sched::CpAttention cp_attention = sched::CpAttention::kAuto);
  // A stream of the kind forward() runs on, for a caller that builds the reducer first.
  static cudaStream_t create_forward_stream();
  ~CudaStageCompute() override;

  static int64_t free_device_bytes();
  kv::KvShape kv_shape() const;
  void allocate_kv(int num_pages);
  // --cp: the ring's largest buffers for this batch, before the KV pool takes what is left
  // (RingOnGpu::reserve): `shard_rows`, the most rows a CP rank holds of a prompt. Nothing
  // without CP.
  void reserve_cp_ring(int64_t shard_rows, int max_chunk_tokens);
  cudaStream_t forward_stream() const { return forward_stream_; }
  // How the host waits for the device (the logits copy, synchronize()): `ready` polled until
  // true. The pipeline installs its watchdog wait, so a hung GPU ends the job with a message
  // naming what was awaited; by default, polling with short naps.
  using Waiter = std::function<void(const std::function<bool()>& ready)>;
  void set_waiter(Waiter waiter) { waiter_ = std::move(waiter); }

  void embed(const int32_t* tokens, int count, float* hidden) override;
  void forward(const compute::ChunkContext& chunk, float* hidden) override;
  void lm_head(const float* hidden_row, float* logits_shard) override;
  // --hidden-states: the rows copied to the host after the forward stream has made them,
  // normed there in float32 with the final norm's weight (exact from bf16), as the cpu does.
  void final_norm(const float* hidden, int rows, float* normed) override;
  // --logprobs, --top-k: every row's logits over this rank's vocabulary slice, computed on the
  // device in blocks of rows (at most 64 MiB of logits at a time) and summarized there
  // (kernels/vocab_summary.cu); only the summaries are copied to the host.
  void summarize_vocab_rows(const float* hidden, int rows, const int32_t* targets, const compute::SummaryShape& shape,
                            std::byte* records) override;
  int vocab_shard_size() const override { return shard_.vocab_count; }
  void share_prefix(int source, int dest, int64_t tokens) override;
  void gather_cp_rows(float* state, int64_t start, int length, int rows) override;
  compute::CpCounts cp_counts() const override { return cp_counts_; }
  // --save-kv, --kv-store: rows of the bf16 cache to and from host floats (exact both ways
  // for values the cache holds), in read_kv's [layers][kv_heads][count][head_dim] layout.
  void read_kv(int prompt, int64_t pos0, int count, float* keys, float* values) const override;
  void write_kv(int prompt, int64_t pos0, int count, const float* keys, const float* values) override;
  void finish_prompt(int prompt) override;
  void prepare_prefix(int prompt, int64_t prefix, int tokens) override;
  int64_t capacity_tokens() const override;
  void synchronize() override;
  bool timed_on_device() const override { return true; }
  void align_clock(double host_now_s) override;
  void take_finished_spans(std::vector<compute::DeviceSpan>& out, bool wait_for_all) override;
  float* profiling_hidden(std::vector<float>& host) override;

  std::vector<int64_t> expert_rows() const override { return expert_rows_; }
  int peak_kv_pages() const { return pages_ ? pages_->peak_pages_in_use() : 0; }

 private:
  class LayerOnGpu;  // the decoder-layer ops on one chunk (cuda_stage_compute.cpp)
  void ensure_workspace(int tokens);
  void upload_page_table(int prompt);
  // Host -> device copy through a pinned staging slot, in forward-stream order, without
  // waiting for the stream (the slot is reused only once its copy has run).
  void upload_async(void* device, const void* host, size_t bytes);
  void wait_event(cudaEvent_t event) const;
  // Device-to-host copies (`enqueue` puts them on the stream it is given) made after the
  // forward stream's work so far, waited for through the waiter (the watchdog): the logits,
  // scored rows, hidden rows and KV pages all leave the device this way.
  void copy_to_host_after_forward(const std::function<void(cudaStream_t)>& enqueue) const;
  // Context parallelism: a chunk's share of this rank, every rank's rows of the prompt so far.
  void begin_cp_chunk(const compute::ChunkContext& chunk, cpu::RingChunk& ring, int64_t& local0);
  sched::CpWidths cp_widths() const;                // what the CP ring moves a token
  int ring_value_width() const;                     // a head's attention output: head_dim, or MLA's kv_lora_rank
  void privatize_page_of(int prompt, int64_t row);  // a shared, partly filled page: copied first
  // Cache rows [row0, row0 + count) of a prompt to and from host floats (read_kv's layout).
  void read_rows(int prompt, int64_t row0, int count, float* keys, float* values) const;
  void write_rows(int prompt, int64_t row0, int count, const float* keys, const float* values);

  model::ModelConfig config_;
  model::ShardSpec shard_;
  compute::LayerShape shape_;
  compute::LayerRecipe recipe_;
  DeviceWeights weights_;
  int page_size_;
  cudaStream_t forward_stream_ = nullptr, copy_stream_ = nullptr;
  LtGemm gemm_;
  dist::TpAllReduce* all_reduce_;
  DeviceArray<double> inv_freq_;
  float rope_scale_;                     // YaRN's attention factor on cos and sin (1 otherwise)
  std::unique_ptr<MoeOnGpu> moe_;        // MoE models
  std::vector<int64_t> expert_rows_;     // [local layers][experts]: rows routed so far
  std::unique_ptr<LatentOnGpu> latent_;  // MLA models
  // Context parallelism: the ring, how it attends, per prompt every CP rank's cached rows.
  dist::CpRing* cp_ring_;
  dist::CpRing* host_cp_ring_;
  sched::CpAttention cp_attention_;
  std::unordered_map<int, std::vector<std::vector<sched::RowRun>>> cp_rows_;
  std::unique_ptr<RingOnGpu> ring_;
  compute::CpCounts cp_counts_;
  DeviceArray<float> cp_gathered_;  // gather_cp_rows: the rows read, in rank order

  // Workspace for one chunk.
  int workspace_tokens_ = 0;
  DeviceArray<bf16> normed_, attn_, act_;
  DeviceArray<float> qkv_, proj_, gate_up_, profile_hidden_;
  DeviceArray<int32_t> tokens_, page_table_;
  DeviceArray<float> logits_;
  DeviceArray<float> row_logits_;             // summarize_vocab_rows: one block of rows' logits,
  DeviceArray<int32_t> row_targets_;          // their targets,
  DeviceArray<unsigned char> row_summaries_;  // and their summaries;
  DeviceArray<int32_t> row_set_;              // the --token-ids set, uploaded once
  std::vector<int32_t> row_set_host_;         // (what row_set_ holds)
  float* logits_host_ = nullptr;              // pinned
  cudaEvent_t forward_done_ = nullptr, copied_ = nullptr,
              drained_ = nullptr;  // copy_to_host_after_forward, synchronize
  Waiter waiter_;

  // KV pool.
  std::unique_ptr<kv::PageTable> pages_;
  DeviceArray<bf16> kv_storage_;
  mutable std::vector<uint16_t> kv_host_;             // read_kv / write_kv: whole pages, as bf16 bits
  std::vector<float> final_norm_host_, hidden_host_;  // final_norm: the weight, the rows

  // Pinned staging slots for small uploads (token ids, page tables).
  struct Staging {
    void* host = nullptr;
    size_t bytes = 0;
    cudaEvent_t done = nullptr;
  };
  std::vector<Staging> staging_;
  size_t next_staging_ = 0;

  // Device timing of forwards.
  struct PendingSpan {
    long long micro_batch;
    cudaEvent_t start, end;
  };
  std::deque<PendingSpan> spans_;
  std::vector<cudaEvent_t> free_events_;
  cudaEvent_t clock_origin_ = nullptr;
  double clock_origin_s_ = 0;
  cudaEvent_t take_event();
};

}  // namespace pf::cuda
