// Context-parallel attention on the CPU (see ring_attention.hpp). Each partial runs on this
// CPU's hand-written tile kernel (attention.cpp: attend_packed_shard) where it fits, else on
// the portable path's blocking (a GQA group's queries packed into one matrix, both products in
// sgemm, an online softmax over key blocks) with the mask by visible counts; either on the
// rank's threads by (KV head, query block).
#include "compute/cpu/ring_attention.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "compute/cpu/attention.hpp"
#include "compute/cpu/gemm.hpp"
#include "compute/cpu/thread_pool.hpp"
#include "io/bf16.hpp"

namespace pf::cpu {
namespace {

constexpr int kTargetQueryRows = 256;  // packed query rows a task
constexpr int kKeyBlock = 256;         // keys per online-softmax step
constexpr float kNoKey = -std::numeric_limits<float>::infinity();

using sched::RowRun;

}  // namespace

GqaRingKeys::GqaRingKeys(const kv::KvLayerView& kv, int heads, float scale, PartialWorkspace& ws)
    : kv_(kv), heads_(heads), scale_(scale), ws_(ws) {}

sched::CpWidths GqaRingKeys::widths() const {
  const kv::KvShape& shape = kv_.pool->shape();
  return sched::CpWidths::grouped_query(heads_, shape.kv_heads, shape.head_dim);
}

void GqaRingKeys::attend(const float* q, int64_t q_stride, int m, const int32_t* visible, const float* shard, int n,
                         float* out, int64_t out_stride, float* lse) {
  const kv::KvShape& shape = kv_.pool->shape();
  const float* v = shard + static_cast<int64_t>(shape.kv_heads) * n * shape.head_dim;
  // (A bf16 cache's Q and P are rounded as the single-rank kernels round them.)
  partial_attention(q, q_stride, m, visible, heads_, shard, v, n, shape.kv_heads, shape.head_dim, scale_, out,
                    out_stride, lse, ws_, kv_.pool->bf16());
}

// This rank's first `rows` cached rows of one layer, packed as K [kv_heads][rows][d] then V.
void GqaRingKeys::pack(int64_t rows, std::vector<float>& packed) const {
  const kv::KvLayerView& kv = kv_;
  const kv::KvShape& shape = kv.pool->shape();
  const int64_t d = shape.head_dim, heads = shape.kv_heads, half = heads * rows * d;
  packed.resize(static_cast<size_t>(2 * half));
  for (int value = 0; value < 2; ++value)
    for (int h = 0; h < heads; ++h) {
      float* dst = packed.data() + value * half + h * rows * d;
      for (int64_t p = 0; p < rows;) {
        const int page = kv.pages->at(static_cast<size_t>(p / shape.page_size));
        const int64_t in_page = p % shape.page_size, run = std::min<int64_t>(shape.page_size - in_page, rows - p);
        kv.pool->load_rows(kv.layer, page, h, value != 0, in_page * d, run * d, dst + p * d);
        p += run;
      }
    }
}

namespace {

// The queries at `positions` against one rank's packed shard (its rows `runs`): partial
// output and log-sum-exp.
void attend_block(const float* q, int64_t q_stride, const std::vector<int64_t>& positions, const float* shard,
                  const std::vector<RowRun>& runs, RingKeys& keys, float* out, int64_t out_stride, float* lse,
                  RingWorkspace& ws) {
  const int m = static_cast<int>(positions.size());
  const int n = static_cast<int>(sched::rows_in(runs));
  ws.visible.resize(static_cast<size_t>(m));
  for (int i = 0; i < m; ++i)
    ws.visible[static_cast<size_t>(i)] = sched::rows_seen(runs, positions[static_cast<size_t>(i)]);
  if (m > 0) keys.attend(q, q_stride, m, ws.visible.data(), shard, n, out, out_stride, lse);
}

std::vector<int64_t> positions_of(const sched::CpShare& share) {
  std::vector<int64_t> positions(static_cast<size_t>(share.rows()));
  for (int i = 0; i < share.rows(); ++i) positions[static_cast<size_t>(i)] = share.position(i);
  return positions;
}

// partial_attention on sgemm. bf16: Q and P rounded where the single-rank path rounds them
// (attention.cpp), so a cp run and one rank round alike on this path too.
void partial_on_sgemm(const float* q, int64_t q_stride, int m, const int32_t* visible, int heads, const float* k,
                      const float* v, int n, int kv_heads, int head_dim, float scale, float* out, int64_t out_stride,
                      float* lse, std::vector<PartialScratch>& scratch, bool bf16) {
  const int d = head_dim, group = heads / kv_heads;
  const int block_tokens = std::max(1, kTargetQueryRows / group);
  const int blocks = (m + block_tokens - 1) / block_tokens;
  ThreadPool& pool = ThreadPool::instance();
  if (static_cast<int>(scratch.size()) < pool.threads()) scratch.resize(static_cast<size_t>(pool.threads()));
  pool.run(kv_heads * blocks, [&](int task, int thread) {
    PartialScratch& ws = scratch[static_cast<size_t>(thread)];
    const int kvh = task % kv_heads, q0 = (task / kv_heads) * block_tokens;
    const int nq = std::min(block_tokens, m - q0), rows = nq * group;
    int most = 0;
    for (int t = 0; t < nq; ++t) most = std::max(most, std::min(visible[q0 + t], n));
    ws.q_packed.resize(static_cast<size_t>(rows) * d);
    ws.scores.resize(static_cast<size_t>(rows) * kKeyBlock);
    ws.acc.assign(static_cast<size_t>(rows) * d, 0.0f);
    ws.row_max.assign(static_cast<size_t>(rows), kMaskedScore);
    ws.row_sum.assign(static_cast<size_t>(rows), 0.0f);
    for (int t = 0; t < nq; ++t)
      for (int j = 0; j < group; ++j) {
        const float* src = q + (q0 + t) * q_stride + static_cast<int64_t>(kvh * group + j) * d;
        float* dst = ws.q_packed.data() + static_cast<int64_t>(t * group + j) * d;
        for (int i = 0; i < d; ++i) dst[i] = (bf16 ? bf16::round(src[i]) : src[i]) * scale;
      }
    const float* keys = k + static_cast<int64_t>(kvh) * n * d;
    const float* values = v + static_cast<int64_t>(kvh) * n * d;
    for (int k0 = 0; k0 < most; k0 += kKeyBlock) {
      const int nk = std::min(kKeyBlock, most - k0);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, nk, d, 1.0f, ws.q_packed.data(), d,
                  keys + static_cast<int64_t>(k0) * d, d, 0.0f, ws.scores.data(), kKeyBlock);
      for (int t = 0; t < nq; ++t) {
        const int seen = std::min(visible[q0 + t], n) - k0;  // of this block's keys
        for (int j = 0; j < group; ++j) {
          const int r = t * group + j;
          float* s = ws.scores.data() + static_cast<int64_t>(r) * kKeyBlock;
          if (seen <= 0) {               // none: the row adds nothing (and skips the softmax step, which
            std::fill(s, s + nk, 0.0f);  // would count masked scores as ones)
            continue;
          }
          for (int c = seen; c < nk; ++c) s[c] = kMaskedScore;
          online_softmax_step(s, nk, ws.row_max[static_cast<size_t>(r)], ws.row_sum[static_cast<size_t>(r)],
                              ws.acc.data() + static_cast<int64_t>(r) * d, d);
          if (bf16) bf16::round_all(s, nk);
        }
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, nk, 1.0f, ws.scores.data(), kKeyBlock,
                  values + static_cast<int64_t>(k0) * d, d, 1.0f, ws.acc.data(), d);
    }
    for (int t = 0; t < nq; ++t)
      for (int j = 0; j < group; ++j) {
        const int r = t * group + j, head = kvh * group + j;
        const float sum = ws.row_sum[static_cast<size_t>(r)];
        float* dst = out + (q0 + t) * out_stride + static_cast<int64_t>(head) * d;
        const float* a = ws.acc.data() + static_cast<int64_t>(r) * d;
        const float inv = sum > 0 ? 1.0f / sum : 0.0f;
        for (int i = 0; i < d; ++i) dst[i] = a[i] * inv;
        lse[static_cast<int64_t>(q0 + t) * heads + head] =
            sum > 0 ? ws.row_max[static_cast<size_t>(r)] + std::log(sum) : kNoKey;
      }
  });
}

}  // namespace

void partial_attention(const float* q, int64_t q_stride, int m, const int32_t* visible, int heads, const float* k,
                       const float* v, int n, int kv_heads, int head_dim, float scale, float* out, int64_t out_stride,
                       float* lse, PartialWorkspace& ws, bool round_bf16, bool portable) {
  if (m == 0) return;
  double pairs = 0;  // (query, visible key) pairs, for the FLOP count
  bool sorted = true;
  int none = 0;  // rows that see no key: a prefix of them when sorted
  for (int i = 0; i < m; ++i) {
    const int seen = std::min(visible[i], n);
    pairs += seen;
    if (i > 0 && seen < std::min(visible[i - 1], n)) sorted = false;
    if (seen == 0 && none == i) ++none;
  }
  count_gemm_flops(4.0 * head_dim * heads * pairs);
  if (!portable && sorted) {
    ws.last_key.resize(static_cast<size_t>(m));
    for (int i = none; i < m; ++i) ws.last_key[static_cast<size_t>(i)] = std::min(visible[i], n) - 1;
    if (none == m || attend_packed_shard(q + none * q_stride, q_stride, m - none, ws.last_key.data() + none, k, v, n,
                                         heads, kv_heads, head_dim, scale, round_bf16, out + none * out_stride,
                                         out_stride, lse + static_cast<int64_t>(none) * heads, ws.kernels)) {
      for (int i = 0; i < none; ++i) {  // rows that see none of these keys add nothing
        std::fill(out + i * out_stride, out + i * out_stride + static_cast<int64_t>(heads) * head_dim, 0.0f);
        std::fill(lse + static_cast<int64_t>(i) * heads, lse + static_cast<int64_t>(i + 1) * heads, kNoKey);
      }
      return;
    }
  }
  partial_on_sgemm(q, q_stride, m, visible, heads, k, v, n, kv_heads, head_dim, scale, out, out_stride, lse,
                   ws.portable, round_bf16);
}

void merge_partial(float* out, float* lse, const float* part, int64_t part_stride, const float* part_lse, int m,
                   int heads, int head_dim) {
  const int64_t width = static_cast<int64_t>(heads) * head_dim;
  parallel_rows(m, [&](int r0, int r1) {
    for (int i = r0; i < r1; ++i)
      for (int h = 0; h < heads; ++h) {
        const float l2 = part_lse[static_cast<int64_t>(i) * heads + h];
        if (l2 == kNoKey) continue;
        float& l1 = lse[static_cast<int64_t>(i) * heads + h];
        float* o = out + i * width + static_cast<int64_t>(h) * head_dim;
        const float* p = part + i * part_stride + static_cast<int64_t>(h) * head_dim;
        if (l1 == kNoKey) {
          std::copy(p, p + head_dim, o);
          l1 = l2;
          continue;
        }
        const float top = std::max(l1, l2);
        const float w1 = std::exp(l1 - top), w2 = std::exp(l2 - top), total = w1 + w2;
        const float a = w1 / total, b = w2 / total;
        for (int c = 0; c < head_dim; ++c) o[c] = a * o[c] + b * p[c];
        l1 = top + std::log(total);
      }
  });
}

void ring_attention(const float* q, int64_t q_stride, const RingChunk& chunk, RingKeys& keys, int64_t local_rows,
                    dist::CpRing& ring, float* out, int64_t out_stride, RingWorkspace& ws) {
  const int ranks = ring.ranks(), me = ring.rank();
  const sched::CpWidths w = keys.widths();
  const int heads = w.heads, d = w.head_out;
  const int64_t width = static_cast<int64_t>(heads) * d, q_width = w.query;
  const int m = chunk.mine.rows();
  const std::vector<std::vector<RowRun>>& rows = *chunk.rows;
  if (sched::rows_in(rows[static_cast<size_t>(me)]) != local_rows)
    throw std::logic_error("ring_attention: this rank's cached rows and its positions disagree");
  const auto shard_floats = [&](int rank) { return int64_t(w.shard) * sched::rows_in(rows[size_t(rank)]); };
  ws.out.assign(static_cast<size_t>(m * width), 0.0f);
  ws.lse.assign(static_cast<size_t>(m) * heads, kNoKey);
  keys.pack(local_rows, ws.shard);

  if (chunk.variant == sched::CpAttention::kPassKv) {
    const std::vector<int64_t> positions = positions_of(chunk.mine);
    ws.partial.resize(static_cast<size_t>(m * width));
    ws.block_lse.resize(static_cast<size_t>(m) * heads);
    // Step s holds the shard of rank me - s; while attending to it, it passes it on and
    // takes the next one (the last step passes nothing).
    for (int s = 0; s < ranks; ++s) {
      const int owner = (me - s + ranks) % ranks;
      const bool more = s + 1 < ranks;
      if (more) {
        ws.incoming.resize(static_cast<size_t>(shard_floats((owner - 1 + ranks) % ranks)));
        ring.start_shift(ws.shard.data(), shard_floats(owner), ws.incoming.data(),
                         static_cast<int64_t>(ws.incoming.size()));
      }
      attend_block(q, q_stride, positions, ws.shard.data(), rows[static_cast<size_t>(owner)], keys, ws.partial.data(),
                   width, ws.block_lse.data(), ws);
      merge_partial(ws.out.data(), ws.lse.data(), ws.partial.data(), width, ws.block_lse.data(), m, heads, d);
      if (more) {
        ring.finish_shift();
        std::swap(ws.shard, ws.incoming);
      }
    }
  } else {
    // Every rank's queries here (rank order), attended to this rank's shard; each owner's
    // partials (outputs, then log-sum-exps) go back to it and merge.
    std::vector<int64_t> q_counts(static_cast<size_t>(ranks)), part_counts(static_cast<size_t>(ranks)),
        back_counts(static_cast<size_t>(ranks));
    std::vector<std::vector<int64_t>> positions(static_cast<size_t>(ranks));
    int64_t all = 0;
    for (int j = 0; j < ranks; ++j) {
      const sched::CpShare share = sched::cp_share(chunk.start, chunk.tokens, ranks, j);
      positions[static_cast<size_t>(j)] = positions_of(share);
      q_counts[static_cast<size_t>(j)] = share.rows() * q_width;
      part_counts[static_cast<size_t>(j)] = share.rows() * (width + heads);
      back_counts[static_cast<size_t>(j)] = static_cast<int64_t>(m) * (width + heads);
      all += share.rows();
    }
    std::vector<float> mine(static_cast<size_t>(m * q_width));
    for (int i = 0; i < m; ++i) std::copy(q + i * q_stride, q + i * q_stride + q_width, mine.begin() + i * q_width);
    ws.queries.resize(static_cast<size_t>(all * q_width));
    ring.all_gather(mine.data(), q_counts, ws.queries.data());
    // Each owner's queries (in position order) attended to this rank's shard, their partials
    // laid out as the owner takes them back: [its rows, width], then [its rows, heads].
    ws.partial.resize(static_cast<size_t>(all * (width + heads)));
    int64_t row0 = 0, at = 0;
    for (int j = 0; j < ranks; ++j) {
      const int64_t n = static_cast<int64_t>(positions[static_cast<size_t>(j)].size());
      attend_block(ws.queries.data() + row0 * q_width, q_width, positions[static_cast<size_t>(j)], ws.shard.data(),
                   rows[static_cast<size_t>(me)], keys, ws.partial.data() + at, width,
                   ws.partial.data() + at + n * width, ws);
      at += n * (width + heads);
      row0 += n;
    }
    ws.returned.resize(static_cast<size_t>(ranks) * m * (width + heads));
    ring.all_to_all(ws.partial.data(), part_counts, ws.returned.data(), back_counts);
    for (int j = 0; j < ranks; ++j) {
      const float* from = ws.returned.data() + static_cast<int64_t>(j) * m * (width + heads);
      merge_partial(ws.out.data(), ws.lse.data(), from, width, from + static_cast<int64_t>(m) * width, m, heads, d);
    }
  }
  for (int i = 0; i < m; ++i)
    std::copy(ws.out.begin() + i * width, ws.out.begin() + (i + 1) * width, out + i * out_stride);
}

}  // namespace pf::cpu
