// KV rows across a CP group (see cp_kv_rows.hpp).
#include "compute/cp_kv_rows.hpp"

#include <algorithm>

namespace pf::compute {

void read_cp_group_rows(const std::vector<std::vector<sched::RowRun>>& rows, dist::CpRing& host_ring,
                        const kv::KvShape& shape, int64_t pos0, int count, const LocalRowsReader& read_local,
                        float* keys, float* values) {
  const int ranks = host_ring.ranks(), me = host_ring.rank();
  // Rank j's positions in [pos0, pos0 + count), in order, and (this rank) its first local row.
  std::vector<std::vector<int64_t>> positions(static_cast<size_t>(ranks));
  int64_t first_local = 0;
  for (int j = 0; j < ranks; ++j) {
    int64_t local = 0;  // (each run clipped to the range: a read costs the range, not the prompt)
    for (const sched::RowRun& run : rows[static_cast<size_t>(j)]) {
      const int64_t lo = std::max(run.pos, pos0), hi = std::min(run.pos + run.count, pos0 + count);
      if (lo < hi && j == me && positions[static_cast<size_t>(j)].empty()) first_local = local + (lo - run.pos);
      for (int64_t p = lo; p < hi; ++p) positions[static_cast<size_t>(j)].push_back(p);
      local += run.count;
    }
  }
  const int64_t block = static_cast<int64_t>(shape.layers) * shape.kv_heads * shape.head_dim;  // floats a row
  const int halves = shape.latent ? 1 : 2;
  std::vector<int64_t> counts(static_cast<size_t>(ranks));
  for (int j = 0; j < ranks; ++j)
    counts[static_cast<size_t>(j)] = halves * block * static_cast<int64_t>(positions[static_cast<size_t>(j)].size());
  const int mine = static_cast<int>(positions[static_cast<size_t>(me)].size());
  std::vector<float> packed(static_cast<size_t>(counts[static_cast<size_t>(me)]));
  if (mine > 0) read_local(first_local, mine, packed.data(), shape.latent ? nullptr : packed.data() + block * mine);
  std::vector<float> all(me == 0 ? static_cast<size_t>(halves * block * count) : 0);
  host_ring.gather_to_first(packed.data(), counts, all.data());
  if (me != 0) return;
  const int64_t d = shape.head_dim;
  const float* from = all.data();
  for (int j = 0; j < ranks; ++j) {
    const std::vector<int64_t>& at = positions[static_cast<size_t>(j)];
    const int64_t n = static_cast<int64_t>(at.size());
    for (int half = 0; half < halves; ++half) {
      float* to = half == 0 ? keys : values;
      for (int64_t lh = 0; lh < int64_t(shape.layers) * shape.kv_heads; ++lh)
        for (int64_t i = 0; i < n; ++i)
          std::copy_n(from + (lh * n + i) * d, d, to + (lh * count + (at[size_t(i)] - pos0)) * d);
      from += block * n;
    }
  }
}

void write_cp_share(std::vector<std::vector<sched::RowRun>>& rows, int rank, const kv::KvShape& shape, int64_t pos0,
                    int count, const float* keys, const float* values, const LocalRowsWriter& write_local) {
  const int ranks = static_cast<int>(rows.size());
  const int64_t local0 = sched::rows_in(rows[static_cast<size_t>(rank)]);
  sched::append_shares(rows, pos0, count);
  const sched::CpShare mine = sched::cp_share(pos0, count, ranks, rank);
  const int n = mine.rows();
  if (n == 0) return;
  const int64_t d = shape.head_dim, blocks = int64_t(shape.layers) * shape.kv_heads;
  const bool latent = shape.latent;
  std::vector<float> k(static_cast<size_t>(blocks * n * d)), v(latent ? 0 : k.size());
  int64_t row = 0;  // the run's first row among this rank's n
  for (const sched::RowRun& run : {mine.first, mine.second}) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t to = (b * n + row) * d, from = (b * count + (run.pos - pos0)) * d;
      std::copy_n(keys + from, run.count * d, k.data() + to);
      if (!latent) std::copy_n(values + from, run.count * d, v.data() + to);
    }
    row += run.count;
  }
  write_local(local0, n, k.data(), latent ? nullptr : v.data());
}

}  // namespace pf::compute
