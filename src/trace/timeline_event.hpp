// One record of the per-rank timeline (trace/timeline.hpp), as the output file stores it:
// no MPI, so the output's writer (io/) includes only this.
#pragma once

#include <cstdint>

namespace pf::trace {

enum class EventKind : int32_t {
  kCompute = 0,
  kRecvWait = 1,
  kSendCommit = 2,
  kAllReduce = 3,
  kLmHead = 4,
  kKvLoad = 5,    // a prefix read from --kv-store into the prompt's pages, before its first chunk
  kKvExport = 6,  // a chunk's K/V copied out of the pool and queued for --save-kv / --kv-store
  kCpGather = 7,  // the last stage with --cp: the CP ranks' rows of a chunk gathered to CP rank 0
};
const char* event_kind_name(EventKind kind);
constexpr int kNumEventKinds = 8;

// The record stored in the output file's /timeline (an HDF5 compound type of these fields).
struct TimelineEvent {
  int32_t rank;
  int32_t stage;
  int32_t tp_rank;
  int32_t kind;
  int32_t micro_batch;
  int32_t prompt;
  int64_t chunk_start;
  int32_t chunk_length;
  double t_start_s;
  double t_end_s;
};

}  // namespace pf::trace
