// Timeline recording and gathering.
#include "trace/timeline.hpp"

#include <algorithm>
#include <cstring>

#include "dist/root_decision.hpp"

namespace pf::trace {

const char* event_kind_name(EventKind kind) {
  switch (kind) {
    case EventKind::kCompute:
      return "compute";
    case EventKind::kRecvWait:
      return "recv_wait";
    case EventKind::kSendCommit:
      return "send_commit";
    case EventKind::kAllReduce:
      return "allreduce";
    case EventKind::kLmHead:
      return "lm_head";
    case EventKind::kKvLoad:
      return "kv_load";
    case EventKind::kKvExport:
      return "kv_export";
    case EventKind::kCpGather:
      return "cp_gather";
  }
  return "?";
}

void Timeline::record(EventKind kind, const sched::MicroBatch& mb, double t_start, double t_end) {
  events_.push_back({topology_.world_rank, topology_.stage, topology_.tp_rank, static_cast<int32_t>(kind), mb.index,
                     mb.prompt, mb.start, mb.length, t_start, t_end});
}

std::vector<TimelineEvent> gather_timeline(const Timeline& timeline, MPI_Comm comm) {
  const auto per_rank = dist::gather_values_on_root(comm, timeline.events());
  std::vector<TimelineEvent> all;
  if (per_rank.here())
    for (const std::vector<TimelineEvent>& events : *per_rank) all.insert(all.end(), events.begin(), events.end());
  std::stable_sort(all.begin(), all.end(),
                   [](const TimelineEvent& a, const TimelineEvent& b) { return a.t_start_s < b.t_start_s; });
  return all;
}

}  // namespace pf::trace
