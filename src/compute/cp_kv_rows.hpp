// A prompt's KV rows read and written across a stage's CP group, whatever the backend
// (run --save-kv, --kv-store, checkpoints with --cp): each CP rank holds its shares of the
// prompt's chunks (sched/context_split.hpp), sorted by position, in its own cache rows 0, 1, ...
//   read:  each rank packs its rows of [pos0, pos0 + count) (a run of its local rows), and CP
//          rank 0 gathers them and puts every row at its position (collective over the group);
//   write: every rank is handed all the rows of [pos0, pos0 + count) and keeps its share, cut
//          as a chunk's, after the rows it holds (a loaded range counts as a chunk of the
//          prompt, for the ring and for later reads).
// Rows are in StageCompute::read_kv's layout: keys and values each [layers][kv_heads][count]
// [head_dim] (a latent cache: its rows in keys alone).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "dist/cp_ring.hpp"
#include "kvcache/paged_kv_pool.hpp"
#include "sched/context_split.hpp"

namespace pf::compute {

// The backend's own rows: cache rows [row0, row0 + n) of the prompt, in that layout.
using LocalRowsReader = std::function<void(int64_t row0, int n, float* keys, float* values)>;
using LocalRowsWriter = std::function<void(int64_t row0, int n, const float* keys, const float* values)>;

// `rows`: every CP rank's runs of the prompt; `host_ring`: the group, on host memory. keys and
// values are written on CP rank 0 only.
void read_cp_group_rows(const std::vector<std::vector<sched::RowRun>>& rows, dist::CpRing& host_ring,
                        const kv::KvShape& shape, int64_t pos0, int count, const LocalRowsReader& read_local,
                        float* keys, float* values);

// `rows` gains the range's shares; this rank's go to write_local at its next cache rows.
void write_cp_share(std::vector<std::vector<sched::RowRun>>& rows, int rank, const kv::KvShape& shape, int64_t pos0,
                    int count, const float* keys, const float* values, const LocalRowsWriter& write_local);

}  // namespace pf::compute
