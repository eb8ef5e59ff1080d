// How results reach the writer (world rank 0). The last stage's TP rank 0 sends one message
// per micro-batch that has results:
//   [token rows of the chunk: --logprobs and --top-k, see TokenRowLayout]   every chunk, when asked for
//   [logits: vocab][hidden state: hidden_width][TTFT: a double]            the prompt's last chunk
// The logits are first gathered from the last stage's TP ranks (each holds a vocabulary
// slice). When the last stage's leader *is* rank 0 (pp == 1) it hands the results over
// directly. Rank 0 is also stage 0 and busy computing, so it keeps receives posted and polls
// them between micro-batches; a prompt's chunks come one after another in the plan, so its
// results arrive in order: its token rows chunk by chunk, then its row.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "dist/p2p.hpp"
#include "dist/topology.hpp"
#include "io/token_rows.hpp"
#include "sched/batch_plan.hpp"

namespace pf::pipeline {

// What every position of a chunk hands back: its token's log-prob (--logprobs), the k most
// likely next tokens (--top-k k) and the log-probs of a fixed token set (--token-ids). In a
// message, a chunk of `count` positions is planar: logprobs [count], then top-k log-probs
// [count, k], then top-k ids [count, k] (int32 bits), then the set's log-probs [count, S].
using TokenRowLayout = io::TokenRowShape;

// One chunk's token rows, positions [start, start + count) of a prompt. logprobs[j] is
// log p(tokens[start + j] | the prompt's tokens before it), NaN at the prompt's first token;
// topk_*[j, :] are the k most likely tokens after tokens[..start + j], most likely first, and
// set_logprobs[j, :] the set's log-probs there.
struct TokenRows {
  int prompt = 0;
  int64_t start = 0;
  int count = 0;
  TokenRowLayout shape;
  io::TokenRowsIn data;  // null where the shape has none
};

// Where results land on world rank 0.
class ResultSink {
 public:
  virtual ~ResultSink() = default;
  virtual void token_rows(const TokenRows& rows) = 0;
  // The prompt's logits row, its hidden-state row (nullptr when the run stores none) and its
  // TTFT (seconds since the run's start, when the last stage had the row gathered).
  virtual void prompt_row(int prompt, const float* logits, const float* hidden, double ttft_s) = 0;
};

// Last-stage side.
class ResultSender {
 public:
  // `hidden_width`: floats of the hidden-state row each prompt carries (0: none).
  ResultSender(const dist::Topology& topology, int vocab_size, int hidden_width, TokenRowLayout token_rows,
               ResultSink& local_sink);
  // Sends micro-batch `mb`'s results. `token_part` (TP rank 0; count x floats_per_token, planar)
  // holds its token rows when the run asks for them. On the prompt's last chunk, collective
  // over the last stage's TP group: `shard` holds this rank's vocabulary slice of the logits,
  // `hidden_row` (TP rank 0) the prompt's hidden state, and `now` reads the run clock (the
  // TTFT is taken once the row is gathered).
  void send(const sched::MicroBatch& mb, const float* token_part, const std::vector<float>& shard,
            const float* hidden_row, const std::function<double()>& now);
  void flush();  // commits every pending send

 private:
  const dist::Topology& topology_;
  int vocab_size_;
  int hidden_width_;
  TokenRowLayout token_rows_;
  std::vector<int> counts_, displacements_;
  ResultSink& local_sink_;
  std::deque<dist::PendingSend> pending_;
};

// Writer side (world rank 0, when it is not itself the last-stage leader).
class ResultInbox {
 public:
  ResultInbox(const dist::Topology& topology, const sched::BatchPlan& plan, int vocab_size, int hidden_width,
              TokenRowLayout token_rows, ResultSink& sink);
  void poll();   // delivers whatever has arrived, never blocks
  void drain();  // waits (without spinning) for every remaining message
  // A stopped run: only micro-batches before `cutoff` run; cancel receives for the others.
  void truncate(long long cutoff);

 private:
  void post_next();
  void deliver_front();
  const dist::Topology& topology_;
  const sched::BatchPlan& plan_;
  int vocab_size_;
  int hidden_width_;
  TokenRowLayout token_rows_;
  ResultSink& sink_;
  std::vector<int> senders_;  // micro-batches whose results come as a message, in plan order
  size_t next_to_post_ = 0;
  std::deque<std::pair<int, dist::PostedRecv>> posted_;  // (micro-batch, receive)
};

}  // namespace pf::pipeline
