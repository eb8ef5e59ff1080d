// Per-rank timeline of what each rank did when: compute, waiting for a receive, committing
// a send, TP all-reduce, LM head. Times are seconds since rank 0's run start (clock-aligned),
// so events from different ranks can be laid side by side.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dist/clock_sync.hpp"
#include "dist/topology.hpp"
#include "sched/batch_plan.hpp"
#include "trace/timeline_event.hpp"

namespace pf::trace {

class Timeline {
 public:
  Timeline(const dist::Topology& topology, const dist::RunClock& clock) : topology_(topology), clock_(clock) {}

  double now() const { return clock_.now(); }
  // A local steady-clock reading (dist::steady_seconds) on this timeline's clock.
  double to_run_time(double local_s) const { return clock_.to_run_time(local_s); }
  void record(EventKind kind, const sched::MicroBatch& mb, double t_start, double t_end);
  const std::vector<TimelineEvent>& events() const { return events_; }

  // Records [construction, destruction) as one event.
  class Scope {
   public:
    Scope(Timeline& timeline, EventKind kind, const sched::MicroBatch& mb)
        : timeline_(timeline), kind_(kind), mb_(mb), start_(timeline.now()) {}
    ~Scope() { timeline_.record(kind_, mb_, start_, timeline_.now()); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Timeline& timeline_;
    EventKind kind_;
    const sched::MicroBatch& mb_;
    double start_;
  };

 private:
  const dist::Topology& topology_;
  dist::RunClock clock_;
  std::vector<TimelineEvent> events_;
};

// Collective: every rank's events, on world rank 0 (empty elsewhere), sorted by start time.
std::vector<TimelineEvent> gather_timeline(const Timeline& timeline, MPI_Comm comm);

}  // namespace pf::trace
