// Context parallelism's pieces that need no MPI: the zigzag token split (sched/
// context_split.hpp), the per-chunk choice of pass-KV or pass-Q, and the partial attention
// with its log-sum-exp merge (compute/cpu/ring_attention.hpp) against the double formula.
// The ring itself runs in the MPI cases (tests/mpi/integration_tests.cmake, mpi.*cp*).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "compute/cpu/ring_attention.hpp"
#include "errors.hpp"
#include "sched/context_split.hpp"

namespace pf {
namespace {

using sched::CpShare;
using sched::RowRun;

TEST(ContextSplit, SharesTileEveryChunkOnceWithRowsWithinOne) {
  for (int ranks = 1; ranks <= 4; ++ranks)
    for (int length = 0; length <= 40; ++length) {
      const int64_t start = 1000;
      std::vector<int> seen(static_cast<size_t>(length), 0);
      int fewest = length, most = 0;
      for (int r = 0; r < ranks; ++r) {
        const CpShare share = sched::cp_share(start, length, ranks, r);
        fewest = std::min(fewest, share.rows());
        most = std::max(most, share.rows());
        if (share.first.count > 0 && share.second.count > 0) {
          EXPECT_LT(share.first.pos, share.second.pos);
        }
        for (int i = 0; i < share.rows(); ++i) {
          const int64_t p = share.position(i);
          ASSERT_GE(p, start);
          ASSERT_LT(p, start + length);
          ++seen[static_cast<size_t>(p - start)];
          if (i > 0) {
            EXPECT_GT(p, share.position(i - 1));  // in position order
          }
        }
      }
      for (int count : seen) EXPECT_EQ(count, 1) << "ranks " << ranks << ", length " << length;
      EXPECT_LE(most - fewest, 1) << "ranks " << ranks << ", length " << length;
      EXPECT_EQ(sched::cp_most_rows(length, ranks), most) << "ranks " << ranks << ", length " << length;
    }
}

TEST(ContextSplit, ZigzagGivesEachRankAnEarlyAndALatePiece) {
  // 16 tokens over 2 ranks: pieces of 4, rank 0 takes pieces 0 and 3, rank 1 pieces 1 and 2.
  const CpShare zero = sched::cp_share(0, 16, 2, 0), one = sched::cp_share(0, 16, 2, 1);
  EXPECT_EQ(zero.first.pos, 0);
  EXPECT_EQ(zero.second.pos, 12);
  EXPECT_EQ(one.first.pos, 4);
  EXPECT_EQ(one.second.pos, 8);
  // A 1-token chunk: rank 0 computes it, the others have no rows.
  EXPECT_EQ(sched::cp_share(7, 1, 3, 0).rows(), 1);
  EXPECT_EQ(sched::cp_share(7, 1, 3, 1).rows(), 0);
  EXPECT_EQ(sched::cp_share(7, 1, 3, 2).rows(), 0);
}

// The last rows of a chunk, the ones the last stage reads, are a suffix of each rank's share
// (its rows are in position order): from(pos) keeps exactly the rank's rows at or after pos.
TEST(ContextSplit, TheRowsFromAPositionAreTheLastOfEachShare) {
  for (int ranks : {2, 3})
    for (int length : {1, 2, 3, 5, 16, 37}) {
      const int64_t start = 100;
      for (int read : {1, 2, length}) {
        if (read > length) continue;
        const int64_t first = start + length - read;
        int total = 0;
        for (int r = 0; r < ranks; ++r) {
          const CpShare all = sched::cp_share(start, length, ranks, r), tail = all.from(first);
          total += tail.rows();
          for (int i = 0; i < all.rows(); ++i)  // the suffix: rows before it lie before `first`
            EXPECT_EQ(all.position(i) >= first, i >= all.rows() - tail.rows()) << ranks << " " << length << " " << r;
          for (int i = 0; i < tail.rows(); ++i) EXPECT_EQ(tail.position(i), all.position(all.rows() - tail.rows() + i));
        }
        EXPECT_EQ(total, read) << ranks << " ranks, " << length << " tokens";
      }
    }
  // A 2-token chunk over 2 ranks: its last row is rank 1's (piece 1), not rank 0's.
  EXPECT_EQ(sched::cp_share(0, 2, 2, 1).from(1).rows(), 1);
  EXPECT_EQ(sched::cp_share(0, 2, 2, 0).from(1).rows(), 0);
}

TEST(ContextSplit, ShardsAddUpToThePromptAndHoldAboutOneCpth) {
  for (int ranks : {2, 3, 4})
    for (int64_t length : {1, 37, 1000, 4097, 65536}) {
      const int chunk = 256;
      int64_t total = 0;
      for (int r = 0; r < ranks; ++r) total += sched::cp_shard_tokens(length, chunk, ranks, r);
      EXPECT_EQ(total, length);
      const int64_t chunks = (length + chunk - 1) / chunk;
      EXPECT_LE(sched::cp_max_shard_tokens(length, chunk, ranks), (length + ranks - 1) / ranks + chunks);
    }
  EXPECT_EQ(sched::cp_shard_lengths({10, 20}, 8, 1), (std::vector<int64_t>{10, 20}));
}

TEST(ContextSplit, AutoPassesQueriesDeepInAPromptAndKvAtItsStart) {
  using sched::CpAttention;
  // SmolLM2's shape: 9 query heads of 64, 3 KV heads.
  const sched::CpWidths smollm2 = sched::CpWidths::grouped_query(9, 3, 64);
  EXPECT_EQ(sched::cp_attention_for_chunk(CpAttention::kAuto, 0, 4096, 2, smollm2), CpAttention::kPassKv);
  EXPECT_EQ(sched::cp_attention_for_chunk(CpAttention::kAuto, 60000, 4096, 2, smollm2), CpAttention::kPassQ);
  EXPECT_EQ(sched::cp_attention_for_chunk(CpAttention::kPassKv, 60000, 4096, 2, smollm2), CpAttention::kPassKv);
  // pass-KV sends (ranks - 1) / ranks of the prompt's K and V so far; pass-Q the chunk's
  // queries and the partial outputs with one log-sum-exp a head.
  const sched::CpWidths small = sched::CpWidths::grouped_query(2, 4, 8);
  EXPECT_DOUBLE_EQ(sched::cp_pass_kv_floats(100, 28, 4, small), 3.0 * 128 / 4 * 2 * 4 * 8);
  EXPECT_DOUBLE_EQ(sched::cp_pass_q_floats(28, 4, small), 3.0 * 28 / 4 * (2 * 16 + 2));
  // MLA (DeepSeek-V3's 128 heads at tp 8): the ring moves 576-float latent rows against queries
  // of 16 x 192 and outputs of 16 x 128, so pass-KV wins for longer.
  const sched::CpWidths mla = sched::CpWidths::latent(16, 576, 192, 128);
  EXPECT_DOUBLE_EQ(sched::cp_pass_q_floats(4, 2, mla), 2.0 * (16 * 192 + 16 * 129));
  EXPECT_EQ(sched::cp_attention_for_chunk(CpAttention::kAuto, 4096, 4096, 2, mla), CpAttention::kPassKv);
  EXPECT_EQ(sched::cp_attention_for_chunk(CpAttention::kAuto, 60000, 4096, 2, mla), CpAttention::kPassQ);
  EXPECT_THROW(sched::parse_cp_attention("ring"), UserError);
}

// Causal attention of queries at `qpos` over keys at `kpos` (every key at or before a query's
// position), in double: [m][heads * d].
std::vector<double> attention_in_double(const std::vector<float>& q, const std::vector<int64_t>& qpos,
                                        const std::vector<float>& k, const std::vector<float>& v,
                                        const std::vector<int64_t>& kpos, int heads, int kv_heads, int d) {
  const int m = static_cast<int>(qpos.size()), n = static_cast<int>(kpos.size()), group = heads / kv_heads;
  std::vector<double> out(static_cast<size_t>(m) * heads * d, 0.0);
  for (int i = 0; i < m; ++i)
    for (int h = 0; h < heads; ++h) {
      const int g = h / group;
      std::vector<double> w(static_cast<size_t>(n), 0.0);
      double top = -1e300, sum = 0;
      for (int j = 0; j < n; ++j) {
        if (kpos[static_cast<size_t>(j)] > qpos[static_cast<size_t>(i)]) continue;
        double s = 0;
        for (int c = 0; c < d; ++c) s += double(q[(size_t(i) * heads + h) * d + c]) * k[(size_t(g) * n + j) * d + c];
        w[static_cast<size_t>(j)] = s / std::sqrt(double(d));
        top = std::max(top, w[static_cast<size_t>(j)]);
      }
      for (int j = 0; j < n; ++j)
        if (kpos[static_cast<size_t>(j)] <= qpos[static_cast<size_t>(i)]) sum += std::exp(w[size_t(j)] - top);
      for (int j = 0; j < n; ++j) {
        if (kpos[static_cast<size_t>(j)] > qpos[static_cast<size_t>(i)]) continue;
        const double p = std::exp(w[static_cast<size_t>(j)] - top) / sum;
        for (int c = 0; c < d; ++c) out[(size_t(i) * heads + h) * d + c] += p * v[(size_t(g) * n + j) * d + c];
      }
    }
  return out;
}

class RingAttentionPaths : public ::testing::TestWithParam<bool> {};  // the kernel's, or sgemm's (portable)

TEST_P(RingAttentionPaths, PartialsOverKeyShardsMergeToCausalAttention) {
  const bool portable = GetParam();
  // 300 positions cut by the zigzag of 3 ranks in chunks of 100; the queries are rank 1's share
  // of the last chunk; the keys every rank's rows. Each shard gives a partial output (masked by
  // position), and their merge is the attention over all keys.
  const int ranks = 3, heads = 4, kv_heads = 2, d = 16, chunk = 100;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<int64_t>> shard_positions(ranks);
  for (int64_t start = 0; start < 300; start += chunk)
    for (int r = 0; r < ranks; ++r) {
      const CpShare share = sched::cp_share(start, chunk, ranks, r);
      for (int i = 0; i < share.rows(); ++i) shard_positions[size_t(r)].push_back(share.position(i));
    }
  const CpShare mine = sched::cp_share(200, chunk, ranks, 1);
  std::vector<int64_t> qpos;
  for (int i = 0; i < mine.rows(); ++i) qpos.push_back(mine.position(i));
  const int m = static_cast<int>(qpos.size());
  std::vector<float> q(size_t(m) * heads * d);
  for (float& x : q) x = normal(rng);

  std::vector<float> merged(size_t(m) * heads * d, 0.0f), lse(size_t(m) * heads, -INFINITY);
  std::vector<float> all_k, all_v;  // [kv_heads][every key][d], in shard order
  std::vector<int64_t> all_pos;
  std::vector<std::vector<float>> shard_k(ranks), shard_v(ranks);
  for (int r = 0; r < ranks; ++r) {
    const int n = static_cast<int>(shard_positions[size_t(r)].size());
    shard_k[size_t(r)].resize(size_t(kv_heads) * n * d);
    shard_v[size_t(r)].resize(size_t(kv_heads) * n * d);
    for (float& x : shard_k[size_t(r)]) x = normal(rng);
    for (float& x : shard_v[size_t(r)]) x = normal(rng);
    std::vector<int32_t> visible(static_cast<size_t>(m));
    for (int i = 0; i < m; ++i)
      visible[size_t(i)] =
          static_cast<int32_t>(std::count_if(shard_positions[size_t(r)].begin(), shard_positions[size_t(r)].end(),
                                             [&](int64_t p) { return p <= qpos[size_t(i)]; }));
    std::vector<float> part(size_t(m) * heads * d), part_lse(size_t(m) * heads);
    cpu::PartialWorkspace ws;
    cpu::partial_attention(q.data(), heads * d, m, visible.data(), heads, shard_k[size_t(r)].data(),
                           shard_v[size_t(r)].data(), n, kv_heads, d, 1.0f / std::sqrt(float(d)), part.data(),
                           heads * d, part_lse.data(), ws, false, portable);
    cpu::merge_partial(merged.data(), lse.data(), part.data(), heads * d, part_lse.data(), m, heads, d);
  }
  // The same keys laid out whole for the double formula.
  int total = 0;
  for (int r = 0; r < ranks; ++r) total += static_cast<int>(shard_positions[size_t(r)].size());
  all_k.resize(size_t(kv_heads) * total * d);
  all_v.resize(all_k.size());
  for (int g = 0; g < kv_heads; ++g) {
    int at = 0;
    for (int r = 0; r < ranks; ++r) {
      const int n = static_cast<int>(shard_positions[size_t(r)].size());
      std::copy_n(shard_k[size_t(r)].begin() + size_t(g) * n * d, size_t(n) * d,
                  all_k.begin() + (size_t(g) * total + at) * d);
      std::copy_n(shard_v[size_t(r)].begin() + size_t(g) * n * d, size_t(n) * d,
                  all_v.begin() + (size_t(g) * total + at) * d);
      at += n;
    }
  }
  for (int r = 0; r < ranks; ++r)
    all_pos.insert(all_pos.end(), shard_positions[size_t(r)].begin(), shard_positions[size_t(r)].end());
  const std::vector<double> expected = attention_in_double(q, qpos, all_k, all_v, all_pos, heads, kv_heads, d);
  double worst = 0;
  for (size_t i = 0; i < expected.size(); ++i) worst = std::max(worst, std::abs(expected[i] - merged[i]));
  EXPECT_LT(worst, 2e-5);
}

INSTANTIATE_TEST_SUITE_P(KernelAndSgemm, RingAttentionPaths, ::testing::Values(false, true));

TEST(RingAttention, ARowThatSeesNoKeyAddsNothing) {
  const int heads = 1, kv_heads = 1, d = 4, n = 3;
  std::vector<float> q = {1, 2, 3, 4, 1, 0, 0, 0}, k(n * d, 0.5f), v = {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3};
  const std::vector<int32_t> visible = {0, 2};  // row 0 sees none of this block, row 1 its first two keys
  std::vector<float> out(2 * d, 7.0f), lse(2, 0.0f);
  cpu::PartialWorkspace ws;
  cpu::partial_attention(q.data(), d, 2, visible.data(), heads, k.data(), v.data(), n, kv_heads, d, 0.5f, out.data(), d,
                         lse.data(), ws);
  EXPECT_TRUE(std::isinf(lse[0]) && lse[0] < 0);
  for (int c = 0; c < d; ++c) EXPECT_EQ(out[size_t(c)], 0.0f);
  for (int c = 0; c < d; ++c) EXPECT_NEAR(out[size_t(d + c)], 1.5f, 1e-6);  // equal scores: the mean of 1 and 2
  // Merged into a row that has a partial already, it changes nothing.
  std::vector<float> merged = {9, 9, 9, 9}, merged_lse = {1.0f};
  cpu::merge_partial(merged.data(), merged_lse.data(), out.data(), d, lse.data(), 1, heads, d);
  EXPECT_EQ(merged, (std::vector<float>{9, 9, 9, 9}));
  EXPECT_EQ(merged_lse[0], 1.0f);
}

// Prefix reuse with CP: an heir holds each rank's runs up to the reused length, cut there.
TEST(ContextSplit, RunsBeforeCutEveryRanksRunsAtThePrefix) {
  std::vector<std::vector<sched::RowRun>> runs(2);
  sched::append_shares(runs, 0, 8);  // rank 0: [0, 2) [6, 8); rank 1: [2, 4) [4, 6)
  sched::append_shares(runs, 8, 8);
  const auto cut = sched::runs_before(runs, 7);
  ASSERT_EQ(cut.size(), 2u);
  EXPECT_EQ(sched::rows_in(cut[0]) + sched::rows_in(cut[1]), 7);
  EXPECT_EQ(sched::rows_in(cut[0]), 3);  // [0, 2) and position 6
  EXPECT_EQ(cut[0].back().pos, 6);
  EXPECT_EQ(cut[0].back().count, 1);
  EXPECT_EQ(sched::rows_seen(runs[1], 3), 2);  // positions 2 and 3
  EXPECT_EQ(sched::rows_seen(runs[0], 5), 2);
}

// A prompt does not take a prefix in the batch from one whose own rows were loaded (store or
// checkpoint): those are split in load pieces, not at its chunks' boundaries.
TEST(ContextSplit, NoReuseInTheBatchFromALoadedPrompt) {
  sched::PrefixPlan plan;
  plan.order = {2, 0, 1, 3};
  plan.reuse.resize(4);
  plan.reuse[2] = {256, -1, 0, false};  // from the store
  plan.reuse[0] = {128, 2, -1, false};  // from 2: dropped
  plan.reuse[1] = {128, 0, -1, false};  // from 0, which now computes its prefix: kept
  plan.reuse[3] = {64, -1, -1, true};   // restored from a checkpoint
  sched::drop_reuse_from_loaded(plan);
  EXPECT_EQ(plan.reuse[2].tokens, 256);
  EXPECT_EQ(plan.reuse[0].tokens, 0);
  EXPECT_EQ(plan.reuse[0].source, -1);
  EXPECT_EQ(plan.reuse[1].tokens, 128);
  EXPECT_TRUE(plan.reuse[3].restored);
}

// Where the store offers a dropped prompt as much as the batch did, the prompt loads it
// instead of computing it all (at cp 1 it would have reused it either way).
TEST(ContextSplit, ADroppedReuseFallsBackToTheStoresOffer) {
  sched::PrefixPlan plan;
  plan.reuse.resize(3);
  plan.reuse[0] = {144, -1, 0, false};  // from the store
  plan.reuse[1] = {80, 0, -1, false};   // from 0 in the batch: dropped ...
  plan.reuse[2] = {32, 1, -1, false};   // from 1, which now loads: dropped, nothing offered
  std::vector<sched::PrefixReuse> offers(3);
  offers[0] = plan.reuse[0];
  offers[1] = {80, -1, 3, false};  // ... for the store's entry 3
  sched::drop_reuse_from_loaded(plan, offers);
  EXPECT_EQ(plan.reuse[1].tokens, 80);
  EXPECT_EQ(plan.reuse[1].store_entry, 3);
  EXPECT_EQ(plan.reuse[1].source, -1);
  EXPECT_EQ(plan.reuse[2].tokens, 0);
}

// A prefix loaded in pieces (--kv-store) is spread over the CP ranks as evenly as one chunk.
TEST(ContextSplit, LoadedPiecesSplitEvenly) {
  for (int ranks : {1, 2, 3, 4, 5})
    for (int64_t prefix : {1, 7, 511, 512, 4096, 10007}) {
      const int piece = sched::cp_load_piece(512, ranks);
      EXPECT_EQ(piece % (2 * ranks), 0);
      EXPECT_GT(piece, 400);
      std::vector<std::vector<sched::RowRun>> runs(static_cast<size_t>(ranks));
      for (int64_t at = 0; at < prefix; at += piece)
        sched::append_shares(runs, at, static_cast<int>(std::min<int64_t>(piece, prefix - at)));
      int64_t fewest = prefix, most = 0, total = 0;
      for (const auto& rank : runs) {
        fewest = std::min(fewest, sched::rows_in(rank));
        most = std::max(most, sched::rows_in(rank));
        total += sched::rows_in(rank);
      }
      EXPECT_EQ(total, prefix);
      EXPECT_LE(most - fewest, 1) << "ranks " << ranks << ", prefix " << prefix;
    }
}

// With a bf16 cache the sgemm path rounds Q and P as the kernel path and the single-rank
// attention do (it once skipped both, so cp and one rank rounded differently there).
TEST(RingAttention, TheSgemmPathRoundsLikeTheKernelsForBf16) {
  const int heads = 4, kv_heads = 2, d = 16, n = 96, m = 40;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(size_t(m) * heads * d), k(size_t(kv_heads) * n * d), v(k.size());
  for (auto* x : {&q, &k, &v})
    for (float& e : *x) e = normal(rng);
  std::vector<int32_t> visible(static_cast<size_t>(m));
  for (int i = 0; i < m; ++i) visible[size_t(i)] = 50 + i;
  auto attend = [&](bool bf16, bool portable) {
    std::vector<float> out(size_t(m) * heads * d), lse(size_t(m) * heads);
    cpu::PartialWorkspace ws;
    cpu::partial_attention(q.data(), heads * d, m, visible.data(), heads, k.data(), v.data(), n, kv_heads, d, 0.25f,
                           out.data(), heads * d, lse.data(), ws, bf16, portable);
    return out;
  };
  const std::vector<float> exact = attend(false, true), rounded = attend(true, true), kernel = attend(true, false);
  double moved = 0, apart = 0;
  for (size_t i = 0; i < exact.size(); ++i) {
    moved = std::max(moved, double(std::abs(rounded[i] - exact[i])));
    apart = std::max(apart, double(std::abs(rounded[i] - kernel[i])));
  }
  EXPECT_GT(moved, 1e-4);  // the rounding happened
  EXPECT_LT(moved, 5e-2);  // at bf16's size
  EXPECT_LT(apart, 2e-2);
}

}  // namespace
}  // namespace pf
