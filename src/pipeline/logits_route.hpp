// How a prompt's result reaches the writer (world rank 0): the last stage's TP ranks gather
// their vocabulary shards to TP rank 0, which sends the full logits row, followed by the
// prompt's hidden-state row when the run stores one (--hidden-states) and the TTFT, as one
// message to rank 0 (or hands it over directly when it *is* rank 0, i.e. pp == 1). Rank 0 is
// also stage 0 and busy computing, so it keeps receives posted and polls them between
// micro-batches.
#pragma once

#include <deque>
#include <functional>
#include <vector>

#include "dist/p2p.hpp"
#include "dist/topology.hpp"
#include "sched/batch_plan.hpp"

namespace pf::pipeline {

// One prompt's result: its logits row, its hidden-state row (nullptr when the run stores
// none) and its TTFT (seconds since the run's start, when the last stage had the row gathered).
using LogitsSink = std::function<void(int prompt, const float* logits, const float* hidden, double ttft_s)>;

// Last-stage side.
class LogitsSender {
 public:
  // `hidden_width`: floats of the hidden-state row each result carries (0: none).
  LogitsSender(const dist::Topology& topology, int vocab_size, int hidden_width, LogitsSink local_sink);
  // Collective over the last stage's TP group. `shard` holds this rank's vocabulary slice;
  // `hidden_row` (read on TP rank 0 only, `hidden_width` floats) the prompt's hidden state;
  // `now` reads the run clock (the TTFT is taken once the row is gathered).
  void send(int prompt, const std::vector<float>& shard, const float* hidden_row, const std::function<double()>& now);
  void flush();  // commits every pending send

 private:
  const dist::Topology& topology_;
  int vocab_size_;
  int hidden_width_;
  std::vector<int> counts_, displacements_;
  LogitsSink local_sink_;
  std::deque<dist::PendingSend> pending_;
};

// Writer side (world rank 0, when it is not itself the last-stage leader).
class LogitsInbox {
 public:
  LogitsInbox(const dist::Topology& topology, const sched::BatchPlan& plan, int vocab_size, int hidden_width,
              LogitsSink sink);
  void poll();   // delivers whatever has arrived, never blocks
  void drain();  // waits (without spinning) for every remaining row
  // A stopped run: only micro-batches before `cutoff` run; cancel receives of prompts whose
  // last chunk is at or after it.
  void truncate(const sched::BatchPlan& plan, long long cutoff);

 private:
  void post_next();
  void deliver_front();
  const dist::Topology& topology_;
  int vocab_size_;
  int hidden_width_;
  LogitsSink sink_;
  std::vector<int> completion_order_;  // prompts in the order their last chunks are scheduled
  size_t next_to_post_ = 0;
  std::deque<std::pair<int, dist::PostedRecv>> posted_;
};

}  // namespace pf::pipeline
