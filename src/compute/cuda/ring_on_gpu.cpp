// Context-parallel attention on the GPU (see ring_on_gpu.hpp).
#include "compute/cuda/ring_on_gpu.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace pf::cuda {
namespace {

std::vector<int64_t> positions_of(const sched::CpShare& share) {
  std::vector<int64_t> positions(static_cast<size_t>(share.rows()));
  for (int i = 0; i < share.rows(); ++i) positions[static_cast<size_t>(i)] = share.position(i);
  return positions;
}

}  // namespace

RingOnGpu::RingOnGpu(dist::CpRing& ring, cudaStream_t forward, Upload upload)
    : ring_(ring), forward_(forward), upload_(std::move(upload)) {}

void RingOnGpu::begin_chunk(const cpu::RingChunk& chunk) {
  chunk_ = &chunk;
  const int ranks = ring_.ranks(), me = ring_.rank();
  const std::vector<std::vector<sched::RowRun>>& rows = *chunk.rows;
  rows_ = chunk.mine.rows();
  visible_host_.clear();
  if (chunk.variant == sched::CpAttention::kPassKv) {  // this rank's queries against each owner's shard
    const std::vector<int64_t> positions = positions_of(chunk.mine);
    for (int owner = 0; owner < ranks; ++owner)
      for (int64_t p : positions) visible_host_.push_back(sched::rows_seen(rows[static_cast<size_t>(owner)], p));
  } else {  // every rank's queries against this rank's shard
    owner_rows_.assign(static_cast<size_t>(ranks), 0);
    for (int j = 0; j < ranks; ++j) {
      const sched::CpShare share = sched::cp_share(chunk.start, chunk.tokens, ranks, j);
      owner_rows_[static_cast<size_t>(j)] = share.rows();
      for (int64_t p : positions_of(share)) visible_host_.push_back(sched::rows_seen(rows[static_cast<size_t>(me)], p));
    }
  }
  visible_.ensure(std::max<size_t>(visible_host_.size(), 1));
  upload_(visible_.data(), visible_host_.data(), sizeof(int32_t) * visible_host_.size());
}

void RingOnGpu::reserve(int64_t shard_rows, int max_chunk, const kv::KvShape& kv, int heads, int value_width) {
  const int ranks = ring_.ranks();
  const int rows = sched::cp_most_rows(max_chunk, ranks);  // the most query rows a rank takes of a chunk
  const int64_t width = static_cast<int64_t>(heads) * value_width, q_width = static_cast<int64_t>(heads) * kv.head_dim,
                shard = (kv.latent ? 1 : 2) * static_cast<int64_t>(kv.kv_heads) * shard_rows * kv.head_dim;
  shard_.ensure(std::max<int64_t>(shard, 1));
  incoming_.ensure(std::max<int64_t>(shard, 1));
  for (DeviceArray<float>* rows_wide : {&out_, &part_}) rows_wide->ensure(std::max<int64_t>(rows * width, 1));
  mine_.ensure(std::max<int64_t>(rows * q_width, 1));
  for (DeviceArray<float>* per_head : {&lse_, &part_lse_}) per_head->ensure(std::max<int64_t>(rows * heads, 1));
  queries_.ensure(std::max<int64_t>(static_cast<int64_t>(max_chunk) * q_width, 1));
  partials_.ensure(std::max<int64_t>(static_cast<int64_t>(max_chunk) * (width + heads), 1));
  returned_.ensure(std::max<int64_t>(static_cast<int64_t>(ranks) * rows * (width + heads), 1));
  visible_.ensure(std::max<size_t>(std::max<size_t>(static_cast<size_t>(ranks) * rows, max_chunk), 1));
}

int64_t RingOnGpu::shard_floats(const kernels::PagedKv& kv, int rank) const {
  const int64_t rows = sched::rows_in((*chunk_->rows)[static_cast<size_t>(rank)]);
  return (kv.latent ? 1 : 2) * static_cast<int64_t>(kv.kv_heads) * rows * kv.head_dim / 2;
}

void RingOnGpu::partial(const float* q, int64_t q_stride, int rows, const int32_t* visible, const kernels::bf16* shard,
                        int n, const kernels::PagedKv& kv, float scale, float* out, int64_t out_stride, float* lse) {
  kernels::PartialAttentionArgs a;
  a.q = q;
  a.q_stride = q_stride;
  a.rows = rows;
  a.heads = heads_;
  a.keys = shard;
  // A latent row is its own value: the first value_width columns of the key row.
  a.values = kv.latent ? shard : shard + static_cast<int64_t>(kv.kv_heads) * n * kv.head_dim;
  a.n = n;
  a.kv_heads = kv.kv_heads;
  a.key_width = kv.head_dim;
  a.value_width = value_width_;
  a.value_row_stride = kv.head_dim;
  a.visible = visible;
  a.scale = scale;
  a.out = out;
  a.out_stride = out_stride;
  a.lse = lse;
  kernels::partial_attention(a, forward_);
  CUDA_CHECK_LAUNCH();
}

const float* RingOnGpu::attend(const float* q, int64_t q_stride, const kernels::PagedKv& kv, int layer,
                               int64_t local_rows, int heads, int value_width, float scale) {
  if (!chunk_) throw std::logic_error("RingOnGpu::attend before begin_chunk");
  const int me = ring_.rank();
  if (sched::rows_in((*chunk_->rows)[static_cast<size_t>(me)]) != local_rows)
    throw std::logic_error("RingOnGpu: this rank's cached rows and its positions disagree");
  heads_ = heads;
  value_width_ = value_width;
  const int64_t width = static_cast<int64_t>(heads) * value_width;
  out_.ensure(std::max<int64_t>(rows_ * width, 1));
  lse_.ensure(std::max<int64_t>(static_cast<int64_t>(rows_) * heads, 1));
  shard_.ensure(std::max<int64_t>(2 * shard_floats(kv, me), 1));
  kernels::pack_kv_rows(kv, layer, local_rows, shard_.data(), forward_);
  CUDA_CHECK_LAUNCH();
  if (chunk_->variant == sched::CpAttention::kPassKv)
    pass_kv(q, q_stride, kv, scale);
  else
    pass_q(q, q_stride, kv, scale);
  return out_.data();
}

// Step s holds the shard of rank me - s, passes it on and takes the next one (the last step
// passes nothing). The first partial is the running merge; the others merge into it.
void RingOnGpu::pass_kv(const float* q, int64_t q_stride, const kernels::PagedKv& kv, float scale) {
  const int ranks = ring_.ranks(), me = ring_.rank(), heads = heads_;
  const int64_t width = static_cast<int64_t>(heads) * value_width_;
  part_.ensure(std::max<int64_t>(rows_ * width, 1));
  part_lse_.ensure(std::max<int64_t>(static_cast<int64_t>(rows_) * heads, 1));
  for (int s = 0; s < ranks; ++s) {
    const int owner = (me - s + ranks) % ranks;
    const bool more = s + 1 < ranks;
    if (more) {
      const int next_owner = (owner - 1 + ranks) % ranks;
      incoming_.ensure(std::max<int64_t>(2 * shard_floats(kv, next_owner), 1));
      ring_.start_shift(reinterpret_cast<const float*>(shard_.data()), shard_floats(kv, owner),
                        reinterpret_cast<float*>(incoming_.data()), shard_floats(kv, next_owner));
    }
    const int n = static_cast<int>(sched::rows_in((*chunk_->rows)[static_cast<size_t>(owner)]));
    const int32_t* visible = visible_.data() + static_cast<int64_t>(owner) * rows_;
    if (s == 0) {
      partial(q, q_stride, rows_, visible, shard_.data(), n, kv, scale, out_.data(), width, lse_.data());
    } else {
      partial(q, q_stride, rows_, visible, shard_.data(), n, kv, scale, part_.data(), width, part_lse_.data());
      kernels::merge_partial(out_.data(), lse_.data(), part_.data(), width, part_lse_.data(), rows_, heads,
                             value_width_, forward_);
      CUDA_CHECK_LAUNCH();
    }
    if (more) {
      ring_.finish_shift();
      std::swap(shard_, incoming_);
    }
  }
}

// Every rank's queries here (rank order), attended to this rank's shard; each owner's
// partials (outputs, then log-sum-exps) go back to it and merge.
void RingOnGpu::pass_q(const float* q, int64_t q_stride, const kernels::PagedKv& kv, float scale) {
  const int ranks = ring_.ranks(), me = ring_.rank(), heads = heads_;
  const int64_t width = static_cast<int64_t>(heads) * value_width_, q_width = static_cast<int64_t>(heads) * kv.head_dim;
  std::vector<int64_t> q_counts(static_cast<size_t>(ranks)), part_counts(static_cast<size_t>(ranks)),
      back_counts(static_cast<size_t>(ranks));
  int64_t all = 0;
  for (int j = 0; j < ranks; ++j) {
    const int64_t n = owner_rows_[static_cast<size_t>(j)];
    q_counts[static_cast<size_t>(j)] = n * q_width;
    part_counts[static_cast<size_t>(j)] = n * (width + heads);
    back_counts[static_cast<size_t>(j)] = static_cast<int64_t>(rows_) * (width + heads);
    all += n;
  }
  mine_.ensure(std::max<int64_t>(rows_ * q_width, 1));
  if (rows_ > 0)
    CUDA_CHECK(cudaMemcpy2DAsync(mine_.data(), sizeof(float) * q_width, q, sizeof(float) * q_stride,
                                 sizeof(float) * q_width, rows_, cudaMemcpyDeviceToDevice, forward_));
  queries_.ensure(std::max<int64_t>(all * q_width, 1));
  ring_.all_gather(mine_.data(), q_counts, queries_.data());
  partials_.ensure(std::max<int64_t>(all * (width + heads), 1));
  const int n = static_cast<int>(sched::rows_in((*chunk_->rows)[static_cast<size_t>(me)]));
  int64_t row0 = 0, at = 0;
  for (int j = 0; j < ranks; ++j) {
    const int64_t rows = owner_rows_[static_cast<size_t>(j)];
    partial(queries_.data() + row0 * q_width, q_width, static_cast<int>(rows), visible_.data() + row0, shard_.data(), n,
            kv, scale, partials_.data() + at, width, partials_.data() + at + rows * width);
    at += rows * (width + heads);
    row0 += rows;
  }
  returned_.ensure(std::max<int64_t>(static_cast<int64_t>(ranks) * rows_ * (width + heads), 1));
  ring_.all_to_all(partials_.data(), part_counts, returned_.data(), back_counts);
  for (int j = 0; j < ranks; ++j) {
    const float* from = returned_.data() + static_cast<int64_t>(j) * rows_ * (width + heads);
    const float* from_lse = from + static_cast<int64_t>(rows_) * width;
    if (j == 0) {
      if (rows_ > 0) {
        CUDA_CHECK(
            cudaMemcpyAsync(out_.data(), from, sizeof(float) * rows_ * width, cudaMemcpyDeviceToDevice, forward_));
        CUDA_CHECK(
            cudaMemcpyAsync(lse_.data(), from_lse, sizeof(float) * rows_ * heads, cudaMemcpyDeviceToDevice, forward_));
      }
    } else {
      kernels::merge_partial(out_.data(), lse_.data(), from, width, from_lse, rows_, heads, value_width_, forward_);
      CUDA_CHECK_LAUNCH();
    }
  }
}

}  // namespace pf::cuda
