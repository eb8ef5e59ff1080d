// Context parallelism's kernels (kernels/ring_attention.cu) against the formula in double
// on the same bf16 keys and values: the partial attention of a CP rank's queries over one
// packed shard, its log-sum-exp included (grouped-query heads, and MLA's absorbed layout,
// whose values are the keys' first columns), rows that see none of the shard; and the merge
// of the partials of a prompt's keys split over three shards, which must give attention over
// all of them, as pass-KV's ring merges them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "kernel_checks.hpp"

using namespace pf;
using kernels::bf16;
using test::as_bf16;
using test::DeviceMemory;
using test::kNaN;
using test::random_vector;
using test::relative_error;
using test::rounded;

namespace {

constexpr float kNoKey = -std::numeric_limits<float>::infinity();

// A shard's shape: keys [kv_heads][n][key_width], values rows of value_row_stride (their first
// value_width columns), from `values` (null: the keys themselves).
struct Shard {
  int n = 0, kv_heads = 0, key_width = 0, value_width = 0;
  int64_t value_row_stride = 0;
  std::vector<float> keys, values;  // bf16-exact
  const std::vector<float>& value_rows() const { return values.empty() ? keys : values; }
};

// Attention in double of q [rows, heads * key_width] over the shard, row i seeing its first
// visible[i] keys: out [rows, heads * value_width] and lse [rows, heads] (-inf: no key).
void reference(const std::vector<float>& q, int rows, int heads, const Shard& s, const std::vector<int32_t>& visible,
               double scale, std::vector<float>& out, std::vector<float>& lse) {
  out.assign(size_t(rows) * heads * s.value_width, 0.0f);
  lse.assign(size_t(rows) * heads, kNoKey);
  const int group = heads / s.kv_heads;
  for (int i = 0; i < rows; ++i)
    for (int h = 0; h < heads; ++h) {
      const int kvh = h / group, seen = std::min(visible[i], s.n);
      if (seen <= 0) continue;
      std::vector<double> scores(seen);
      double top = -1e300;
      for (int j = 0; j < seen; ++j) {
        double dot = 0;
        for (int c = 0; c < s.key_width; ++c)
          dot +=
              double(q[(size_t(i) * heads + h) * s.key_width + c]) * s.keys[(size_t(kvh) * s.n + j) * s.key_width + c];
        scores[j] = dot * scale;
        top = std::max(top, scores[j]);
      }
      double sum = 0;
      for (double& x : scores) sum += (x = std::exp(x - top));
      for (int c = 0; c < s.value_width; ++c) {
        double acc = 0;
        for (int j = 0; j < seen; ++j)
          acc += scores[j] * s.value_rows()[(size_t(kvh) * s.n + j) * s.value_row_stride + c];
        out[(size_t(i) * heads + h) * s.value_width + c] = static_cast<float>(acc / sum);
      }
      lse[size_t(i) * heads + h] = static_cast<float>(top + std::log(sum));
    }
}

// The kernel's partial over `s` (device copies made here).
void kernel_partial(const std::vector<float>& q, int rows, int heads, const Shard& s,
                    const std::vector<int32_t>& visible, float scale, std::vector<float>& out,
                    std::vector<float>& lse) {
  DeviceMemory<float> d_q(q);
  DeviceMemory<bf16> d_k(as_bf16(s.keys));
  DeviceMemory<bf16> d_v(as_bf16(s.values.empty() ? std::vector<float>{0.0f} : s.values));
  DeviceMemory<int32_t> d_visible(visible);
  DeviceMemory<float> d_out(std::vector<float>(size_t(rows) * heads * s.value_width, kNaN));
  DeviceMemory<float> d_lse(std::vector<float>(size_t(rows) * heads, kNaN));
  kernels::PartialAttentionArgs a;
  a.q = d_q.get();
  a.q_stride = int64_t(heads) * s.key_width;
  a.rows = rows;
  a.heads = heads;
  a.keys = d_k.get();
  a.values = s.values.empty() ? d_k.get() : d_v.get();
  a.n = s.n;
  a.kv_heads = s.kv_heads;
  a.key_width = s.key_width;
  a.value_width = s.value_width;
  a.value_row_stride = s.value_row_stride;
  a.visible = d_visible.get();
  a.scale = scale;
  a.out = d_out.get();
  a.out_stride = int64_t(heads) * s.value_width;
  a.lse = d_lse.get();
  kernels::partial_attention(a, nullptr);
  EXPECT_SYNCED();
  out = d_out.read();
  lse = d_lse.read();
}

double lse_error(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == kNoKey) {
      if (got[i] != kNoKey) return std::numeric_limits<double>::infinity();
      continue;
    }
    if (std::isnan(got[i])) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::abs(double(got[i]) - want[i]));
  }
  return worst;
}

// Non-decreasing visible counts: the first rows see nothing, the last more than the shard.
std::vector<int32_t> visible_counts(int rows, int n) {
  std::vector<int32_t> v(rows);
  for (int i = 0; i < rows; ++i) v[i] = std::max(0, (i - 3) * (n + 9) / std::max(1, rows - 4));
  return v;
}

}  // namespace

// Grouped-query heads run on chunk_attention's tensor-core tiles, which round Q and P to bf16
// as the single-rank kernel does: Q is given bf16-exact, so the log-sum-exp is exact to float
// sums and the output to bf16's rounding of P. One block of query rows and several.
TEST(RingKernels, PartialAttentionOfGroupedQueryHeads) {
  REQUIRE_DEVICE();
  for (const auto& [d, rows] : {std::pair{32, 37}, std::pair{64, 37}, std::pair{64, 150}}) {
    const int heads = 4, kv_heads = 2, n = 70;
    Shard s{n,
            kv_heads,
            d,
            d,
            d,
            rounded(random_vector(size_t(kv_heads) * n * d, 2)),
            rounded(random_vector(size_t(kv_heads) * n * d, 3))};
    const std::vector<float> q = rounded(random_vector(size_t(rows) * heads * d, 1));
    const std::vector<int32_t> visible = visible_counts(rows, n);
    const float scale = 1.0f / std::sqrt(float(d));
    std::vector<float> want, want_lse, got, got_lse;
    reference(q, rows, heads, s, visible, scale, want, want_lse);
    kernel_partial(q, rows, heads, s, visible, scale, got, got_lse);
    const double error = relative_error(got, want), lse = lse_error(got_lse, want_lse);
    EXPECT_LE(error, test::kBf16Tolerance) << "head_dim " << d << ", " << rows << " rows";
    EXPECT_LE(lse, 1e-4) << "head_dim " << d << ", " << rows << " rows";
    RecordProperty("out_relative_error_d" + std::to_string(d) + "_rows" + std::to_string(rows),
                   test::scientific(error));
  }
}

// MLA's absorbed attention: one kv head of rows [latent | k_rope], the values their latent.
TEST(RingKernels, PartialAttentionOverLatentRows) {
  REQUIRE_DEVICE();
  const int rows = 21, heads = 4, latent = 16, width = 24, n = 45;
  Shard s{n, 1, width, latent, width, rounded(random_vector(size_t(n) * width, 5)), {}};
  const std::vector<float> q = random_vector(size_t(rows) * heads * width, 4);
  const std::vector<int32_t> visible = visible_counts(rows, n);
  std::vector<float> want, want_lse, got, got_lse;
  reference(q, rows, heads, s, visible, 0.2, want, want_lse);
  kernel_partial(q, rows, heads, s, visible, 0.2f, got, got_lse);
  EXPECT_LE(relative_error(got, want), 1e-5);
  EXPECT_LE(lse_error(got_lse, want_lse), 1e-4);
}

// A prompt's 90 keys (positions 0..89) dealt to three shards in runs, as the zigzag deals
// them; queries at their own positions see the keys before them in each shard. The merged
// partials must be attention over all the keys, whatever order they arrive in.
TEST(RingKernels, MergedPartialsAreAttentionOverEveryShard) {
  REQUIRE_DEVICE();
  const int heads = 2, kv_heads = 1, d = 32, keys = 90, ranks = 3;
  const std::vector<float> all_k = rounded(random_vector(size_t(keys) * d, 7));
  const std::vector<float> all_v = rounded(random_vector(size_t(keys) * d, 8));
  std::vector<std::vector<int>> owned(ranks);  // positions each shard holds, sorted
  for (int p = 0; p < keys; ++p) {
    const int piece = p / 15;  // six pieces of 15: rank r holds pieces r and 5 - r
    owned[std::min(piece, 5 - piece)].push_back(p);
  }
  std::vector<int> query_pos;  // every 4th position, sorted
  for (int p = 0; p < keys; p += 4) query_pos.push_back(p);
  const int rows = int(query_pos.size());
  const std::vector<float> q = rounded(random_vector(size_t(rows) * heads * d, 9));  // (tensor-core tiles: bf16 Q)
  const float scale = 0.3f;

  Shard whole{keys, kv_heads, d, d, d, all_k, all_v};
  std::vector<int32_t> see_all(rows);
  for (int i = 0; i < rows; ++i) see_all[i] = query_pos[i] + 1;
  std::vector<float> want, want_lse;
  reference(q, rows, heads, whole, see_all, scale, want, want_lse);

  const size_t width = size_t(heads) * d;
  DeviceMemory<float> d_out(std::vector<float>(rows * width, 0.0f));
  DeviceMemory<float> d_lse(std::vector<float>(size_t(rows) * heads, kNoKey));
  for (const int r : {1, 0, 2}) {  // not in rank order: the merge is order-free
    Shard s{int(owned[r].size()), kv_heads, d, d, d, {}, {}};
    std::vector<int32_t> visible(rows, 0);
    for (int j = 0; j < s.n; ++j) {
      const int p = owned[r][j];
      s.keys.insert(s.keys.end(), all_k.begin() + size_t(p) * d, all_k.begin() + size_t(p + 1) * d);
      s.values.insert(s.values.end(), all_v.begin() + size_t(p) * d, all_v.begin() + size_t(p + 1) * d);
      for (int i = 0; i < rows; ++i)
        if (p <= query_pos[i]) visible[i] = j + 1;
    }
    std::vector<float> part, part_lse;
    kernel_partial(q, rows, heads, s, visible, scale, part, part_lse);
    DeviceMemory<float> d_part(part), d_part_lse(part_lse);
    kernels::merge_partial(d_out.get(), d_lse.get(), d_part.get(), int64_t(width), d_part_lse.get(), rows, heads, d,
                           nullptr);
    EXPECT_SYNCED();
  }
  const double error = relative_error(d_out.read(), want), lse = lse_error(d_lse.read(), want_lse);
  EXPECT_LE(error, test::kBf16Tolerance);  // P in bf16 on the tiles
  EXPECT_LE(lse, 1e-4);
  RecordProperty("merged_relative_error", test::scientific(error));
}

// pack_kv_rows gathers a rank's first rows of one layer from its pages (in table order, here
// reversed so that paging errors cannot hide) into the shard the ring moves: K then V.
TEST(RingKernels, PackGathersTheCachedRowsOfOneLayer) {
  REQUIRE_DEVICE();
  const int layers = 2, layer = 1, kv_heads = 2, d = 8, page_size = 16, rows = 37;
  const int pages = (rows + page_size - 1) / page_size;
  const int64_t page_layer = 2LL * kv_heads * page_size * d;
  const std::vector<float> cache = rounded(random_vector(size_t(pages + 1) * layers * page_layer, 11));
  std::vector<int32_t> table(pages);
  for (int p = 0; p < pages; ++p) table[p] = pages - p;  // page 0 unused
  DeviceMemory<bf16> d_cache(as_bf16(cache));
  DeviceMemory<int32_t> d_table(table);
  kernels::PagedKv kv;
  kv.base = d_cache.get();
  kv.page_table = d_table.get();
  kv.layers = layers;
  kv.kv_heads = kv_heads;
  kv.head_dim = d;
  kv.page_size = page_size;
  DeviceMemory<bf16> d_shard(as_bf16(std::vector<float>(size_t(2) * kv_heads * rows * d, kNaN)));
  kernels::pack_kv_rows(kv, layer, rows, d_shard.get(), nullptr);
  EXPECT_SYNCED();
  const std::vector<float> shard = test::as_float(d_shard.read());
  for (int half = 0; half < 2; ++half)
    for (int h = 0; h < kv_heads; ++h)
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < d; ++c) {
          const int64_t page = table[r / page_size], slot = r % page_size;
          const float want = cache[(page * layers + layer) * page_layer + half * page_layer / 2 +
                                   (int64_t(h) * page_size + slot) * d + c];
          ASSERT_EQ(shard[((size_t(half) * kv_heads + h) * rows + r) * d + c], want)
              << "half " << half << " head " << h << " row " << r;
        }
}
