// The stage event loop. Every rank walks the same micro-batch list; prompts follow one
// another without draining the pipe.
//
// Buffers circulate as transport slots: a receive is posted into a free slot; once it has
// arrived the slot *is* the chunk's hidden state, computed on in place, then sent on;
// when that send is committed the slot returns to the free list. So at most ring_depth
// receives are posted ahead and ring_depth sends are in flight, and no buffer is written
// while a transfer may still be reading it. The transport decides where slots live (host
// or device) and how they move (MPI, NCCL); see dist/transport.hpp.
#include "pipeline/stage_loop.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "dist/collectives.hpp"
#include "errors.hpp"

namespace pf::pipeline {

namespace {

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
  ProgressCounts done;
  const LogitsSink sink = [&](int prompt, const float* logits, double ttft_s) {
    ++done.prompts;
    ctx.sink(prompt, logits, ttft_s);
    if (ctx.progress) ctx.progress->update(done);  // also while draining
  };
  dist::Transport& transport = ctx.transport;
  std::deque<int> receives;  // slots; receives[k] is micro-batch i + k
  long long next_to_post = 0;
  std::deque<int> sends;     // slots whose sends are not committed yet

  // Device-timed backends report their compute spans themselves (CUDA events).
  const bool device_timed = ctx.compute.timed_on_device();
  std::vector<compute::DeviceSpan> spans;
  auto record_device_spans = [&](bool wait_for_all) {
    if (!device_timed) return;
    spans.clear();
    ctx.compute.take_finished_spans(spans, wait_for_all);
    for (const auto& span : spans)
      ctx.timeline.record(EventKind::kCompute, mbs[span.micro_batch], span.start_s, span.end_s);
  };
  if (device_timed) ctx.compute.align_clock(ctx.timeline.now());
  const compute::AllReduce device_reduce = ctx.compute.device_all_reduce();

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
      transport.cancel_recv(receives.back());  // posted for a micro-batch that will not run
      transport.release(receives.back());
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
    }
    if (control != MPI_REQUEST_NULL) {
      int arrived = 0;
      MPI_CHECK(MPI_Test(&control, &arrived, MPI_STATUS_IGNORE));
      if (arrived) apply_cutoff(notice);
    }
    // A device all-reduce does not hold the host back, so stage 0's TP ranks could enqueue
    // different numbers of micro-batches, and rank 0's stop cutoff could fall behind one of
    // them. So with a device all-reduce, stage 0's TP group agrees on the micro-batch count
    // before each micro-batch (rank 0 is its TP rank 0): a tiny broadcast, microseconds.
    if (device_reduce && topo.first_stage() && topo.tp > 1) {
      dist::WaitLabel label(stage_name + " keeping TP ranks in step at micro-batch " + std::to_string(i));
      int agreed = static_cast<int>(count);
      dist::broadcast_int(agreed, 0, topo.tp_comm);
      if (agreed < count) apply_cutoff(agreed);
    }
    if (i >= count) break;
    const sched::MicroBatch& mb = mbs[i];
    maybe_hang(topo.world_rank, mb.index);
    // Keep `depth` receives posted ahead, so a sender never waits for us to post.
    while (!topo.first_stage() && next_to_post < count && next_to_post < i + depth) {
      const auto& ahead = mbs[next_to_post];
      const int slot = transport.acquire();
      transport.post_recv(slot, ahead.length * payload, dist::tag_of(next_to_post));
      receives.push_back(slot);
      ++next_to_post;
    }

    int state = -1;  // the slot holding this micro-batch's hidden states
    if (topo.first_stage()) {
      state = transport.acquire();
      const int32_t* tokens = ctx.prompts.tokens.data() + ctx.prompts.offsets[mb.prompt] + mb.start;
      ctx.compute.embed(tokens, mb.length, transport.data(state));
    } else {
      trace::Timeline::Scope wait(ctx.timeline, EventKind::kRecvWait, mb);
      dist::WaitLabel label(stage_name + " receiving " + describe(mb) + " from rank " + std::to_string(topo.prev_rank));
      if (!transport.wait_recv(receives.front(), &control)) {  // a stop notice came first
        apply_cutoff(notice);
        if (i >= count) break;
        transport.wait_recv(receives.front(), nullptr);
      }
      state = receives.front();
      receives.pop_front();
    }

    {
      // Host-timed backends: the span is the forward call. Device-timed ones return at once
      // and report the span from CUDA events (record_device_spans).
      std::optional<trace::Timeline::Scope> compute;
      if (!device_timed) compute.emplace(ctx.timeline, EventKind::kCompute, mb);
      const compute::ChunkContext chunk{mb.prompt, mb.start, mb.length, mb.index};
      ctx.compute.forward(chunk, transport.data(state), [&](float* data, int n) {
        traffic.allreduce_payload_bytes += 4.0 * n;
        if (device_reduce) return device_reduce(data, n);  // enqueued on the device, timed inside compute
        trace::Timeline::Scope reduce(ctx.timeline, EventKind::kAllReduce, mb);
        dist::WaitLabel label(stage_name + " TP all-reduce in " + describe(mb));
        dist::allreduce_sum(data, n, topo.tp_comm);
      });
    }
    // The prompt's last chunk has passed this stage: its KV pages are free again.
    if (mb.is_last) ctx.compute.finish_prompt(mb.prompt);

    if (topo.last_stage()) {
      if (mb.is_last) {
        trace::Timeline::Scope head(ctx.timeline, EventKind::kLmHead, mb);
        dist::WaitLabel label(stage_name + " gathering and sending the logits of prompt " + std::to_string(mb.prompt));
        ctx.compute.lm_head(transport.data(state) + static_cast<int64_t>(mb.length - 1) * hidden,
                            logits_shard.data());
        sender->send(mb.prompt, logits_shard, [&] { return ctx.timeline.now(); });
      }
      transport.release(state);
    } else {
      transport.start_send(state, mb.length * payload, dist::tag_of(i));
      sends.push_back(state);
      traffic.p2p_bytes_sent += 4.0 * mb.length * payload;
      // Commit finished sends early (cheap), and block only when the ring is full.
      while (!sends.empty() && (sends.size() > static_cast<size_t>(depth) || transport.send_done(sends.front()))) {
        trace::Timeline::Scope commit(ctx.timeline, EventKind::kSendCommit, mb);
        dist::WaitLabel label(stage_name + " committing a send to rank " + std::to_string(topo.next_rank) +
                              " (the ring is full at " + describe(mb) + ")");
        transport.finish_send(sends.front());
        transport.release(sends.front());
        sends.pop_front();
      }
    }
    record_device_spans(false);
    if (inbox) inbox->poll();
    if (ctx.progress) {
      ++done.micro_batches;  // stage 0 walks the plan in order: micro-batches 0..i are done
      done.tokens += mb.length;
      ctx.progress->update(done);
    }
  }

  // Drain: every send is committed before the loop returns, never skipped.
  dist::WaitLabel label(stage_name + " draining: last sends to rank " + std::to_string(topo.next_rank) +
                        " and the logits still expected");
  for (int slot : sends) transport.finish_send(slot);
  sends.clear();
  ctx.compute.synchronize();
  record_device_spans(true);
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
