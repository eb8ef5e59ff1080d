// The stage event loop. Every rank walks the same micro-batch list; prompts follow one
// another without draining the pipe.
//
// Buffers circulate: a receive is posted into a free buffer; once it has arrived the
// buffer *is* the chunk's hidden state, computed on in place, then handed to a
// PendingSend; when that send is committed the buffer returns to the free list. So at
// most ring_depth receives are posted ahead and ring_depth sends are in flight, and no
// buffer is written while MPI may still be reading it.
#include "pipeline/stage_loop.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "dist/collectives.hpp"
#include "errors.hpp"

namespace pf::pipeline {

namespace {

class BufferPool {
 public:
  explicit BufferPool(size_t floats) : floats_(floats) {}
  dist::Buffer take() {
    if (free_.empty()) return dist::Buffer(floats_);
    dist::Buffer b = std::move(free_.back());
    free_.pop_back();
    return b;
  }
  void give(dist::Buffer b) { free_.push_back(std::move(b)); }

 private:
  size_t floats_;
  std::vector<dist::Buffer> free_;
};

std::string describe(const sched::MicroBatch& mb) {
  return "micro-batch " + std::to_string(mb.index) + " (prompt " + std::to_string(mb.prompt) + ", tokens " +
         std::to_string(mb.start) + ".." + std::to_string(mb.start + mb.length) + ")";
}

// Test hook: PIPEFILL_TEST_HANG_RANK=r and PIPEFILL_TEST_HANG_MICRO_BATCH=i make rank r stop
// forever before micro-batch i, as a hung device would; the watchdog tests rely on it.
void maybe_hang(int rank, int micro_batch) {
  static const char* hang_rank = std::getenv("PIPEFILL_TEST_HANG_RANK");
  static const char* hang_at = std::getenv("PIPEFILL_TEST_HANG_MICRO_BATCH");
  if (!hang_rank || std::atoi(hang_rank) != rank || (hang_at && std::atoi(hang_at) != micro_batch)) return;
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(3600));
}

}  // namespace

LoopResult run_stage_loop(StageLoopContext& ctx) {
  using trace::EventKind;
  const auto& topo = ctx.topology;
  const auto& mbs = ctx.plan.micro_batches;
  const int hidden = ctx.hidden_size;
  const int payload = ctx.compute.payload_floats_per_token();  // floats per token on the wire
  const int depth = ctx.ring_depth;
  long long count = static_cast<long long>(mbs.size());  // shrinks if the run is stopped
  LoopResult result;
  TrafficCounters& traffic = result.traffic;
  const std::string stage_name = "stage " + std::to_string(topo.stage);
  // Rank 0 counts what it has done for the progress line.
  int prompts_done = 0;
  int64_t tokens_done = 0;
  const LogitsSink sink = [&](int prompt, const float* logits, double ttft_s) {
    ++prompts_done;
    ctx.sink(prompt, logits, ttft_s);
    if (ctx.progress) ctx.progress->update(tokens_done, prompts_done);  // also while draining
  };
  BufferPool pool(static_cast<size_t>(ctx.plan.max_chunk()) * std::max(hidden, payload));

  std::deque<dist::PostedRecv> receives;  // receives[k] is micro-batch next_to_receive + k
  long long next_to_post = 0;
  std::deque<dist::PendingSend> sends;

  std::unique_ptr<LogitsInbox> inbox;
  if (topo.is_writer() && topo.world_rank != topo.last_stage_leader())
    inbox = std::make_unique<LogitsInbox>(topo, ctx.plan, ctx.vocab_size, sink);
  std::unique_ptr<LogitsSender> sender;
  std::vector<float> logits_shard;
  if (topo.last_stage()) {
    sender = std::make_unique<LogitsSender>(topo, ctx.vocab_size, sink);
    logits_shard.resize(ctx.compute.vocab_shard_size());
  }

  // Graceful stop. Rank 0 picks a cutoff (the first micro-batch of the next prompt not yet
  // started: prompts in flight finish) and sends it to every rank on the control
  // communicator; the others keep a receive for it posted and look at it between
  // micro-batches and while waiting for data, so none waits for a chunk that never comes.
  constexpr int kStopTag = 9001;
  long long notice = -1;
  MPI_Request control = MPI_REQUEST_NULL;
  std::vector<MPI_Request> notices_sent;
  if (!topo.is_writer()) MPI_CHECK(MPI_Irecv(&notice, 1, MPI_LONG_LONG, 0, kStopTag, topo.control_comm, &control));
  auto apply_cutoff = [&](long long cutoff) {
    result.stopped = true;
    count = std::min(count, cutoff);
    while (!receives.empty() && next_to_post - 1 >= count) {  // receives cover [next_to_post - size, next_to_post)
      receives.back().cancel();  // posted for a micro-batch that will not run
      receives.pop_back();
      --next_to_post;
    }
    if (inbox) inbox->truncate(ctx.plan, count);
  };

  for (long long i = 0; i < count; ++i) {
    if (topo.is_writer() && ctx.stop_requested && *ctx.stop_requested && !result.stopped) {
      long long cutoff = i;
      while (cutoff < count && mbs[cutoff].start != 0) ++cutoff;
      notices_sent.resize(topo.world_size - 1);
      for (int r = 1; r < topo.world_size; ++r)
        MPI_CHECK(MPI_Isend(&cutoff, 1, MPI_LONG_LONG, r, kStopTag, topo.control_comm, &notices_sent[r - 1]));
      apply_cutoff(cutoff);
      std::fprintf(stderr, "stopping: finishing the %lld micro-batch(es) of prompts already started, then saving\n",
                   count - i);
      for (auto& request : notices_sent) dist::wait_polling(&request);  // tiny messages, eager
      if (i >= count) break;
    }
    if (control != MPI_REQUEST_NULL) {
      int arrived = 0;
      MPI_CHECK(MPI_Test(&control, &arrived, MPI_STATUS_IGNORE));
      if (arrived) apply_cutoff(notice);
      if (i >= count) break;
    }
    const sched::MicroBatch& mb = mbs[i];
    maybe_hang(topo.world_rank, mb.index);
    // Keep `depth` receives posted ahead, so a sender never waits for us to post.
    while (!topo.first_stage() && next_to_post < count && next_to_post < i + depth) {
      const auto& ahead = mbs[next_to_post];
      receives.push_back(dist::PostedRecv::post(pool.take(), ahead.length * payload, topo.prev_rank,
                                                dist::tag_of(next_to_post), topo.pipeline_comm));
      ++next_to_post;
    }

    dist::Buffer state;
    if (topo.first_stage()) {
      state = pool.take();
      const int32_t* tokens = ctx.prompts.tokens.data() + ctx.prompts.offsets[mb.prompt] + mb.start;
      ctx.compute.embed(tokens, mb.length, state.data());
    } else {
      trace::Timeline::Scope wait(ctx.timeline, EventKind::kRecvWait, mb);
      dist::WaitLabel label(stage_name + " receiving " + describe(mb) + " from rank " + std::to_string(topo.prev_rank));
      if (control != MPI_REQUEST_NULL) {
        auto arrived = receives.front().wait_or(&control);
        if (!arrived) {  // a stop notice came first
          apply_cutoff(notice);
          if (i >= count) break;
          arrived = receives.front().wait();
        }
        state = std::move(*arrived);
      } else {
        state = receives.front().wait();
      }
      receives.pop_front();
    }

    {
      trace::Timeline::Scope compute(ctx.timeline, EventKind::kCompute, mb);
      ctx.compute.forward({mb.prompt, mb.start, mb.length}, state.data(), [&](float* data, int n) {
        trace::Timeline::Scope reduce(ctx.timeline, EventKind::kAllReduce, mb);
        dist::WaitLabel label(stage_name + " TP all-reduce in " + describe(mb));
        dist::allreduce_sum(data, n, topo.tp_comm);
        traffic.allreduce_payload_bytes += 4.0 * n;
      });
    }
    // The prompt's last chunk has passed this stage: its KV pages are free again.
    if (mb.is_last) ctx.compute.finish_prompt(mb.prompt);

    if (topo.last_stage()) {
      if (mb.is_last) {
        trace::Timeline::Scope head(ctx.timeline, EventKind::kLmHead, mb);
        dist::WaitLabel label(stage_name + " gathering and sending the logits of prompt " + std::to_string(mb.prompt));
        ctx.compute.lm_head(state.data() + static_cast<int64_t>(mb.length - 1) * hidden, logits_shard.data());
        sender->send(mb.prompt, logits_shard, [&] { return ctx.timeline.now(); });
      }
      pool.give(std::move(state));
    } else {
      sends.push_back(dist::PendingSend::start(std::move(state), mb.length * payload, topo.next_rank, dist::tag_of(i),
                                               topo.pipeline_comm));
      traffic.p2p_bytes_sent += 4.0 * mb.length * payload;
      // Commit finished sends early (cheap), and block only when the ring is full.
      while (!sends.empty() && (sends.size() > static_cast<size_t>(depth) || sends.front().test())) {
        trace::Timeline::Scope commit(ctx.timeline, EventKind::kSendCommit, mb);
        dist::WaitLabel label(stage_name + " committing a send to rank " + std::to_string(topo.next_rank) +
                              " (the ring is full at " + describe(mb) + ")");
        pool.give(sends.front().commit());
        sends.pop_front();
      }
    }
    if (inbox) inbox->poll();
    if (ctx.progress) {
      tokens_done += mb.length;
      ctx.progress->update(tokens_done, prompts_done);
    }
  }

  // Drain: every send is committed before the loop returns, never skipped.
  dist::WaitLabel label(stage_name + " draining: last sends to rank " + std::to_string(topo.next_rank) +
                        " and the logits still expected");
  for (auto& send : sends) send.commit();
  sends.clear();
  if (sender) sender->flush();
  if (inbox) inbox->drain();
  if (ctx.progress) ctx.progress->finish();
  if (control != MPI_REQUEST_NULL) {  // no stop came: withdraw the notice's receive
    MPI_CHECK(MPI_Cancel(&control));
    dist::wait_polling(&control);
  }
  return result;
}

}  // namespace pf::pipeline
