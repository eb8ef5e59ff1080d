// The simulator's recurrence. Micro-batches are visited in schedule order and, for each,
// stages in pipeline order; every quantity used is already known at that point:
//  - stage s starts iteration i when iteration i-1 ended (its compute, and the commit of
//    the send it had to wait for);
//  - stage s posts the receive of micro-batch j at the start of iteration j - depth + 1;
//  - the transfer of micro-batch i from s to s+1 starts when the send is issued (compute
//    end), the receive is posted, and the link has put the previous message on the wire
//    (bandwidth is shared in time; latency overlaps);
//  - after issuing send i, a full ring (more than `depth` sends outstanding) blocks until
//    the transfer of send i - depth has ended (computed when stage s+1 took it, earlier).
#include "sim/pipeline_sim.hpp"

#include <algorithm>

namespace pf::sim {
namespace {

// The rows of a micro-batch the last stage's LM head runs on: with per-token scores those
// from the prompt's first scored row on (StageLoop's token rows), else the prompt's last row
// on its last chunk.
int64_t lm_head_rows(const sched::MicroBatch& mb, const SimSetup& setup) {
  if (!setup.scores) return mb.is_last ? 1 : 0;
  const int64_t from = static_cast<size_t>(mb.prompt) < setup.score_from.size() ? setup.score_from[mb.prompt] : 0;
  return std::max<int64_t>(0, mb.start + mb.length - std::max(mb.start, from));
}

}  // namespace

SimResult simulate_pipeline(const sched::BatchPlan& plan, const std::vector<StageCost>& stages, const SimSetup& setup) {
  using trace::EventKind;
  const int pp = static_cast<int>(stages.size());
  const auto& mbs = plan.micro_batches;
  const long long count = static_cast<long long>(mbs.size());
  const int depth = setup.ring_depth;

  SimResult result;
  result.ttft_s.assign(plan.num_prompts(), 0.0);
  result.boundary_bytes.assign(std::max(0, pp - 1), 0.0);
  // Per stage, per micro-batch: iteration start, compute end (= send issue), transfer end.
  std::vector<std::vector<double>> loop_start(pp, std::vector<double>(count, 0.0));
  std::vector<std::vector<double>> send_issue(pp, std::vector<double>(count, 0.0));
  std::vector<std::vector<double>> transfer_end(pp, std::vector<double>(count, 0.0));
  std::vector<double> stage_clock(pp, 0.0);  // when the stage's loop is free for its next iteration
  std::vector<double> link_busy(pp, 0.0);    // the link s -> s+1 carries one message at a time (latency overlaps)

  auto emit = [&](int stage, EventKind kind, const sched::MicroBatch& mb, double t0, double t1) {
    result.events.push_back({stage * setup.tp * setup.cp, stage, 0, static_cast<int32_t>(kind), mb.index, mb.prompt,
                             mb.start, mb.length, t0, t1});
  };

  for (long long i = 0; i < count; ++i) {
    const sched::MicroBatch& mb = mbs[i];
    // One CP rank's share (its tokens): the CP ranks send at once, each on its own link.
    const double message_bytes = static_cast<double>(mb.length) / setup.cp * setup.hidden_size * setup.activation_bytes;
    for (int s = 0; s < pp; ++s) {
      const double start = stage_clock[s];
      loop_start[s][i] = start;
      double ready = start;
      if (s > 0) {
        // Transfer s-1 -> s of micro-batch i.
        const long long post_iteration = std::max<long long>(0, i - depth + 1);
        const double posted = loop_start[s][post_iteration];
        const LinkSpec& link = setup.links[s - 1];
        const double begin = std::max({send_issue[s - 1][i], posted, link_busy[s - 1]});
        link_busy[s - 1] = begin + message_bytes / link.bandwidth_Bps;
        transfer_end[s - 1][i] = begin + link.transfer_s(message_bytes);
        result.boundary_bytes[s - 1] += message_bytes * setup.tp * setup.cp;
        ready = std::max(start, transfer_end[s - 1][i]);
        if (ready > start) emit(s, EventKind::kRecvWait, mb, start, ready);
      }
      const double compute_end = ready + stages[s].chunk_seconds(static_cast<double>(mb.start), mb.length);
      emit(s, EventKind::kCompute, mb, ready, compute_end);
      double end = compute_end;
      const int64_t head_rows = s < pp - 1 ? 0 : lm_head_rows(mb, setup);
      if (head_rows > 0) {
        end = compute_end + stages[s].lm_head_s * static_cast<double>(head_rows);
        emit(s, EventKind::kLmHead, mb, compute_end, end);
        if (mb.is_last) result.ttft_s[mb.prompt] = end;
      }
      if (s < pp - 1) {
        send_issue[s][i] = compute_end;
        if (i - depth >= 0) {  // the ring holds depth sends: commit the oldest
          const double committed = transfer_end[s][i - depth];
          if (committed > end) {
            emit(s, EventKind::kSendCommit, mb, end, committed);
            end = committed;
          }
        }
      }
      stage_clock[s] = end;
    }
  }
  for (int s = 0; s < pp; ++s) result.makespan_s = std::max(result.makespan_s, stage_clock[s]);
  // The drain: stage s commits its last sends after the loop.
  for (int s = 0; s + 1 < pp; ++s)
    if (count > 0) result.makespan_s = std::max(result.makespan_s, transfer_end[s][count - 1]);
  return result;
}

}  // namespace pf::sim
