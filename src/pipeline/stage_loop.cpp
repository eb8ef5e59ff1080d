// The stage event loop. Every rank walks the same micro-batch list; prompts follow one
// another without draining the pipe. Written as a schedule in three phases:
//
//   warm-up       post the receives of micro-batches [0, min(depth, count)) (stages > 0)
//   steady state  for each micro-batch i < count (count shrinks if a stop cuts the plan):
//                   keep receives posted for [i, min(i + depth, count)),
//                   receive-forward i (stage 0: embed it), compute, then send-forward i
//                   (the last stage: its results), committing sends while more than `depth`
//                   are in flight or the oldest has finished
//   drain         commit every send still in flight (at most `depth`; never skipped),
//                 wait for the device, flush the logits
//
// Buffers circulate as transport slots (dist/transport.hpp): a posted receive (RecvTicket)
// becomes the chunk's hidden state (ReadySlot), computed on in place, then a send in
// flight (SendTicket) whose commit returns the slot for a later receive. So at most `depth`
// receives are posted ahead and `depth` sends are in flight, and no buffer is written
// while a transfer may still read it. The graceful stop and checkpoint calls are
// dist/control_notices.hpp; what a checkpoint does, checkpoint_run.hpp.
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
#include "dist/control_notices.hpp"
#include "dist/wait.hpp"
#include "errors.hpp"
#include "pipeline/hidden_state_rows.hpp"
#include "pipeline/token_scorer.hpp"
#include "sched/context_split.hpp"
#include "sched/hidden_slots.hpp"

namespace pf::pipeline {

namespace {

using trace::EventKind;

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

// Test hook: PIPEFILL_TEST_MICRO_BATCH_DELAY_MS=n makes every rank wait n ms before each
// micro-batch, as a slow device would, so that a signal sent once the first progress line is
// out lands inside the prompt even where a GPU computes the whole test prompt in 0.1 s.
void maybe_delay() {
  static const int delay_ms = [] {
    const char* value = std::getenv("PIPEFILL_TEST_MICRO_BATCH_DELAY_MS");
    return value ? std::max(0, std::atoi(value)) : 0;
  }();
  if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
}

class StageLoop {
 public:
  explicit StageLoop(StageLoopContext& context);
  LoopResult run() {
    warm_up();
    for (long long i = 0; i < count_; ++i)
      if (!steady_state(i)) break;
    drain();
    result_.micro_batches_run = count_;
    return result_;
  }

 private:
  // The phases.
  void warm_up() { post_receives_until(std::min<long long>(depth_, count_)); }
  bool steady_state(long long i);  // false: a stop cut the plan at i
  void drain();

  // One micro-batch's steps.
  void look_for_stop(long long i);
  void take_checkpoint_calls();
  std::optional<dist::ReadySlot> receive_forward(long long i);  // nullopt: cut off while waiting
  void compute(const sched::MicroBatch& mb, dist::ReadySlot& state);
  void export_kv(const sched::MicroBatch& mb);
  void send_forward(long long i, dist::ReadySlot state);
  void export_kv_rows(int prompt, int64_t start, int count, bool is_last, bool to_checkpoint);
  // --checkpoint-every: the chunk's rows go to the checkpoint's writer (a prompt of one chunk
  // is never checkpointed: a boundary inside it does not exist).
  bool feeds_checkpoint(const sched::MicroBatch& mb) const {
    return ctx_.checkpoint && ctx_.checkpoint->feeds_every_chunk() && !(mb.is_first && mb.is_last);
  }
  void load_prefix(const sched::MicroBatch& mb);
  void emit_results(const sched::MicroBatch& mb, dist::ReadySlot state);  // the last stage
  // Context parallelism: the rows of micro-batch `mb` this rank computes (all of them without
  // CP), and on the last stage the rows read gathered into CP rank 0's `state`.
  sched::CpShare share(const sched::MicroBatch& mb) const {
    return topo_.cp > 1 ? sched::cp_share(mb.start, mb.length, topo_.cp, topo_.cp_rank)
                        : sched::CpShare{{mb.start, mb.length}, {}};
  }
  int rows(const sched::MicroBatch& mb) const { return share(mb).rows(); }
  void gather_cp_rows(const sched::MicroBatch& mb, float* state);
  const float* rows_read_in(const sched::MicroBatch& mb, const float* state) const;
  int rows_read(const sched::MicroBatch& mb) const;
  int first_output_row(const sched::MicroBatch& mb) const;
  void finish_prompt(const sched::MicroBatch& mb);
  void finish_micro_batch(const sched::MicroBatch& mb);

  void post_receives_until(long long end);
  void apply_cutoff(long long cutoff);
  void record_device_spans(bool wait_for_all);
  void record_all_reduces(const sched::MicroBatch& mb);

  StageLoopContext& ctx_;
  const dist::Topology& topo_;
  const std::vector<sched::MicroBatch>& mbs_;
  dist::Transport& transport_;
  const int depth_;
  const bool device_timed_;  // the backend reports its compute spans itself (CUDA events)
  const std::string stage_name_;
  long long count_;  // micro-batches to run; shrinks if the run is stopped
  LoopResult result_;
  ProgressCounts done_;  // rank 0: what it has done, for the progress line

  std::deque<dist::RecvTicket> receives_;  // receives_[k] is micro-batch next_to_post_ - size + k
  long long next_to_post_ = 0;
  std::deque<dist::SendTicket> sends_;  // oldest first

  // Graceful stop: rank 0 announces a cutoff (the next micro-batch, the prompt in flight
  // checkpointed; without checkpoints, the first micro-batch of the next prompt not yet
  // started: prompts in flight finish) after any checkpoint call; the others take them
  // between micro-batches, or when the stop interrupts a receive-wait.
  dist::ControlNotices notice_;
  long long calls_accepted_ = 0;  // the sequence of the last checkpoint call taken

  // ctx_.sink, counting prompts for the progress line.
  class CountingSink final : public ResultSink {
   public:
    explicit CountingSink(StageLoop& loop) : loop_(loop) {}
    void token_rows(const TokenRows& rows) override { loop_.ctx_.sink->token_rows(rows); }
    void prompt_row(int prompt, const float* logits, const float* hidden, double ttft_s) override {
      ++loop_.done_.prompts;
      loop_.ctx_.sink->prompt_row(prompt, logits, hidden, ttft_s);
      if (loop_.ctx_.progress) loop_.ctx_.progress->update(loop_.done_);  // also while draining
    }

   private:
    StageLoop& loop_;
  };
  CountingSink sink_{*this};
  std::unique_ptr<ResultInbox> inbox_;    // world rank 0, unless it is the last stage's leader
  std::unique_ptr<ResultSender> sender_;  // the last stage
  std::unique_ptr<TokenScorer> scorer_;   // the last stage, with token rows
  std::vector<float> logits_shard_;
  const int hidden_width_;                        // 0: none stored
  std::unique_ptr<HiddenStateRows> hidden_rows_;  // the last stage's TP rank 0, with --hidden-states
  // Prefix reuse: the prompts that take over each prompt's first KV pages when it finishes.
  std::vector<std::vector<int>> heirs_;

  std::vector<compute::DeviceSpan> spans_;
  int64_t reduced_bytes_ = 0;  // the TP reducer's payload counted so far
};

StageLoop::StageLoop(StageLoopContext& ctx)
    : ctx_(ctx),
      topo_(ctx.topology),
      mbs_(ctx.plan.micro_batches),
      transport_(ctx.transport),
      depth_(ctx.ring_depth),
      device_timed_(ctx.compute.timed_on_device()),
      stage_name_("stage " + std::to_string(ctx.topology.stage)),
      count_(static_cast<long long>(ctx.plan.micro_batches.size())),
      notice_(ctx.topology.control_comm),
      hidden_width_(ctx.hidden_states == compute::HiddenStatesKind::kNone ? 0 : ctx.hidden_size) {
  if (device_timed_) ctx.compute.align_clock(ctx.timeline.now());
  // What the TP reducer did before the loop (the profile) is not the loop's.
  if (ctx.all_reduce) {
    reduced_bytes_ = ctx.all_reduce->payload_bytes();
    ctx.all_reduce->take_spans();
  }
  if (topo_.is_writer() && topo_.world_rank != topo_.last_stage_leader())
    inbox_ = std::make_unique<ResultInbox>(topo_, ctx.plan, ctx.vocab_size, hidden_width_, ctx.token_rows, sink_);
  if (topo_.emits_results()) {
    sender_ = std::make_unique<ResultSender>(topo_, ctx.vocab_size, hidden_width_, ctx.token_rows, sink_);
    if (ctx.token_rows.any())
      scorer_ = std::make_unique<TokenScorer>(topo_, ctx.compute, ctx.prompts, ctx.vocab_size, ctx.token_rows,
                                              ctx.token_set ? *ctx.token_set : std::vector<int32_t>{});
    logits_shard_.resize(ctx.compute.vocab_shard_size());
    if (hidden_width_ > 0 && topo_.tp_rank == 0) {
      HiddenStateRows::Store store;  // --hidden-states mean with --kv-store: sums lent, rows kept
      if (ctx.kv_store && ctx.hidden_states == compute::HiddenStatesKind::kMean) {
        KvStoreRun* kv_store = ctx.kv_store;
        store.prefix_sum = [kv_store](int entry, int64_t c) { return kv_store->hidden_prefix_sum(entry, c); };
        store.keep_rows = [kv_store](int prompt, int64_t start, int count, const float* rows) {
          kv_store->keep_hidden_rows(prompt, start, count, rows);
        };
      }
      hidden_rows_ = std::make_unique<HiddenStateRows>(ctx.compute, ctx.hidden_states, ctx.hidden_size, ctx.plan,
                                                       std::move(store));
    }
  }
  if (ctx.checkpoint) {
    ctx.checkpoint->start(ctx.plan, ctx.compute, scorer_.get(), hidden_rows_.get());
    const std::optional<RestoredPrompt>& restored = ctx.checkpoint->restored();
    if (restored && hidden_rows_ && !restored->hidden_sum.empty())
      hidden_rows_->restore(restored->prompt, restored->hidden_sum);
  }
  heirs_.resize(ctx.plan.prompt_lengths.size());
  for (size_t p = 0; p < ctx.plan.reuse.size(); ++p)
    if (ctx.plan.reuse[p].source >= 0) heirs_[ctx.plan.reuse[p].source].push_back(static_cast<int>(p));
}

bool StageLoop::steady_state(long long i) {
  look_for_stop(i);
  if (i >= count_) return false;
  const sched::MicroBatch& mb = mbs_[i];
  maybe_hang(topo_.world_rank, mb.index);
  maybe_delay();
  post_receives_until(std::min(i + depth_, count_));  // after the warm-up: one more per step
  std::optional<dist::ReadySlot> state = receive_forward(i);
  if (!state) return false;
  if (ctx_.checkpoint) {  // (after the receive: a call for this cutoff is here by now)
    take_checkpoint_calls();
    ctx_.checkpoint->reach(i);
  }
  compute(mb, *state);
  if (topo_.last_stage() && topo_.cp > 1 && ctx_.results_computed && rows_read(mb) > 0)
    gather_cp_rows(mb, state->data());
  if (topo_.emits_results())
    emit_results(mb, std::move(*state));
  else if (topo_.last_stage())
    transport_.release(std::move(*state));
  else
    send_forward(i, std::move(*state));
  finish_micro_batch(mb);
  return true;
}

void StageLoop::drain() {
  dist::WaitLabel label(stage_name_ + " draining: last sends to rank " + std::to_string(topo_.next_rank) +
                        " and the logits still expected");
  for (dist::SendTicket& send : sends_) send.commit();
  sends_.clear();
  ctx_.compute.synchronize();
  record_device_spans(true);
  const compute::CpCounts cp = ctx_.compute.cp_counts();
  result_.traffic.cp_bytes_sent = static_cast<double>(cp.bytes_sent);
  result_.traffic.cp_pass_kv_steps = cp.pass_kv_steps;
  result_.traffic.cp_pass_q_steps = cp.pass_q_steps;
  if (sender_) sender_->flush();
  if (inbox_) inbox_->drain();
  // Rank 0's last notice, unless a stop was: the end, with the sequence of its last call.
  if (ctx_.checkpoint && topo_.is_writer() && !notice_.announced()) notice_.announce_end(calls_accepted_);
  if (ctx_.checkpoint) {       // a stop's cutoff inside a prompt: its checkpoint, on every rank
    if (!topo_.is_writer()) {  // every call rank 0 made is answered, if only as missed
      dist::WaitLabel calls(stage_name_ + " waiting for rank 0's last notice (the end of the run, or its stop)");
      dist::wait_until([&] {
        take_checkpoint_calls();
        const std::optional<long long> last = notice_.last_call();
        return last && calls_accepted_ >= *last;
      });
    }
    ctx_.checkpoint->reach(count_);
    ctx_.checkpoint->finish();
  }
  if (ctx_.progress) ctx_.progress->finish();
}

void StageLoop::take_checkpoint_calls() {
  if (topo_.is_writer()) return;  // rank 0 accepts its own calls as it announces them
  while (const std::optional<dist::CheckpointCall> call = notice_.take_checkpoint()) {
    ctx_.checkpoint->accept(*call);
    calls_accepted_ = call->sequence;
  }
}

// Rank 0 turns a stop request into a cutoff and announces it; the others take it once it
// has arrived; and stage 0's TP group agrees on the count.
void StageLoop::look_for_stop(long long i) {
  CheckpointRun* checkpoint = ctx_.checkpoint;
  if (topo_.is_writer() && checkpoint && !notice_.announced())
    if (const std::optional<dist::CheckpointCall> call = checkpoint->due(i)) {
      notice_.announce_checkpoint(*call);
      checkpoint->accept(*call);
      calls_accepted_ = call->sequence;
    }
  // Another rank's own stop signal reaches rank 0 as a request; rank 0 announces the stop.
  const bool signalled = ctx_.stop_requested && *ctx_.stop_requested;
  if (!topo_.is_writer() && signalled) notice_.request_stop();
  if (topo_.is_writer() && (signalled || notice_.stop_requested_elsewhere()) && !notice_.announced()) {
    long long cutoff = i;
    if (checkpoint && checkpoint->enabled() && i < count_) {  // the prompt in flight is checkpointed where it stands
      if (const std::optional<dist::CheckpointCall> call = checkpoint->final_call(i)) {
        notice_.announce_checkpoint(*call);
        checkpoint->accept(*call);
        calls_accepted_ = call->sequence;
      }
      const auto& restored = checkpoint->restored();
      if (mbs_[i].is_first && restored && restored->prompt == mbs_[i].prompt)  // not yet run on: its checkpoint stays
        std::fprintf(stderr, "stopping: prompt %d keeps its checkpoint at token %lld, saving\n", mbs_[i].prompt,
                     static_cast<long long>(mbs_[i].start));
      else if (mbs_[i].is_first)
        std::fprintf(stderr, "stopping: no prompt in flight, saving\n");
      else
        std::fprintf(stderr, "stopping: checkpointing prompt %d at token %lld, then saving\n", mbs_[i].prompt,
                     static_cast<long long>(mbs_[i].start));
    } else {  // no checkpoints (the emulator, or a failed write): the prompts in flight finish
      while (cutoff < count_ && !mbs_[cutoff].is_first) ++cutoff;
      std::fprintf(stderr, "stopping: finishing the %lld micro-batch(es) of prompts already started, then saving\n",
                   count_ - i);
    }
    notice_.announce(cutoff, calls_accepted_);
    apply_cutoff(cutoff);
  }
  if (const std::optional<long long> cutoff = notice_.take()) apply_cutoff(*cutoff);
  // Stage 0's TP (and CP) ranks embed without waiting for anyone, and nothing else makes them
  // agree on where a stop cuts the plan: a host all-reduce or CP ring keeps them in step only
  // inside a micro-batch (a rank that missed the notice would enter micro-batch `cutoff` and
  // wait in its all-reduce for a peer that stopped), a device one (NCCL) or the emulator's
  // modelled one not even that. So stage 0's ranks agree on the micro-batch count, and on
  // the checkpoint calls made so far, before each micro-batch (rank 0 is the first of them):
  // a tiny broadcast, microseconds.
  if (topo_.first_stage() && topo_.tp * topo_.cp > 1) {
    dist::WaitLabel label(stage_name_ + " keeping its ranks in step at micro-batch " + std::to_string(i));
    std::vector<long long> agreed = {count_, calls_accepted_};
    dist::broadcast_vector(agreed, topo_.stage_comm);
    if (agreed[0] < count_) apply_cutoff(agreed[0]);
    if (ctx_.checkpoint && !topo_.is_writer())
      dist::wait_until([&] {  // the calls rank 0 made are on their way: take them before going on
        take_checkpoint_calls();
        return calls_accepted_ >= agreed[1];
      });
  }
}

// Stage 0 embeds the chunk's tokens into a fresh slot; the others take the oldest posted
// receive, unless a stop notice cuts the plan before micro-batch i while they wait.
std::optional<dist::ReadySlot> StageLoop::receive_forward(long long i) {
  const sched::MicroBatch& mb = mbs_[i];
  if (topo_.first_stage()) {
    dist::ReadySlot state = transport_.fresh();
    const int32_t* tokens = ctx_.prompts.tokens.data() + ctx_.prompts.offsets[mb.prompt];
    const sched::CpShare mine = share(mb);  // (without CP: the whole chunk, as one run)
    const int h = ctx_.hidden_size;
    ctx_.compute.embed(tokens + mine.first.pos, mine.first.count, state.data());
    if (mine.second.count > 0)
      ctx_.compute.embed(tokens + mine.second.pos, mine.second.count,
                         state.data() + static_cast<int64_t>(mine.first.count) * h);
    return std::optional<dist::ReadySlot>(std::move(state));
  }
  trace::Timeline::Scope wait(ctx_.timeline, EventKind::kRecvWait, mb);
  dist::WaitLabel label(stage_name_ + " receiving " + describe(mb) + " from rank " + std::to_string(topo_.prev_rank));
  std::optional<dist::ReadySlot> state = receives_.front().wait_unless(notice_);
  if (!state) {  // a stop notice came first
    apply_cutoff(*notice_.take());
    if (i >= count_) return std::nullopt;
    state = receives_.front().wait();
  }
  receives_.pop_front();
  return state;
}

void StageLoop::compute(const sched::MicroBatch& mb, dist::ReadySlot& state) {
  if (mb.is_first && ctx_.plan.reuse[mb.prompt].store_entry >= 0) load_prefix(mb);
  if (mb.is_first && ctx_.plan.reuse[mb.prompt].restored) {
    trace::Timeline::Scope span(ctx_.timeline, EventKind::kKvLoad, mb);
    dist::WaitLabel label(stage_name_ + " restoring the first " + std::to_string(mb.start) + " tokens of prompt " +
                          std::to_string(mb.prompt) + " from its checkpoint");
    try {
      ctx_.checkpoint->load_restored(mb.prompt);
    } catch (const std::exception& e) {
      fail_library_call("pipefill", "restoring a prompt from its checkpoint", e.what(), __FILE__, __LINE__);
    }
  }
  {
    // Host-timed backends: the span is the forward call. Device-timed ones return at once
    // and report the span from CUDA events (record_device_spans).
    std::optional<trace::Timeline::Scope> span;
    if (!device_timed_) span.emplace(ctx_.timeline, EventKind::kCompute, mb);
    // Names the micro-batch for the watchdog, should a TP all-reduce inside never complete.
    dist::WaitLabel label(stage_name_ + " computing " + describe(mb) + (topo_.tp > 1 ? " (TP all-reduces)" : ""));
    const compute::ChunkContext chunk{mb.prompt, mb.start, mb.length, mb.index, first_output_row(mb)};
    ctx_.compute.forward(chunk, state.data());
  }
  record_all_reduces(mb);
  if (ctx_.kv_export || ctx_.kv_store || feeds_checkpoint(mb)) export_kv(mb);
  if (mb.is_last) finish_prompt(mb);
}

// How many of `mb`'s rows, the last ones, anything reads after this stage's forward:
// every row but on the last stage, where without token scores or mean hidden states only
// the prompt's last row is read (its logits, its last hidden state), on its last chunk. The
// TP and CP ranks of a stage decide alike.
int StageLoop::rows_read(const sched::MicroBatch& mb) const {
  const bool every_row =
      sched::last_stage_reads_every_row(ctx_.token_rows.any(), ctx_.hidden_states == compute::HiddenStatesKind::kMean);
  if (!topo_.last_stage() || every_row) return mb.length;
  return mb.is_last ? 1 : 0;
}

// Where the rows read are in a slot after the forward (and the CP gather): at their
// positions, but with CP at the front, where the gather put them (gather_cp_rows).
const float* StageLoop::rows_read_in(const sched::MicroBatch& mb, const float* state) const {
  const int64_t skipped = topo_.cp > 1 ? 0 : mb.length - rows_read(mb);
  return state + skipped * ctx_.hidden_size;
}

// The first row the backend must finish (compute::OutputRows). With CP each rank holds its
// own rows of the chunk, whose attention is a collective of the group: all of them.
int StageLoop::first_output_row(const sched::MicroBatch& mb) const {
  return topo_.cp > 1 ? 0 : mb.length - rows_read(mb);
}

// The prompt's last chunk has passed this stage: the prompts that reuse its prefix take over
// those KV pages (each page is counted once, and lives while a prompt holds it), and the rest
// of its pages are free again.
void StageLoop::finish_prompt(const sched::MicroBatch& mb) {
  for (int heir : heirs_[mb.prompt]) ctx_.compute.share_prefix(mb.prompt, heir, ctx_.plan.reuse[heir].tokens);
  ctx_.compute.finish_prompt(mb.prompt);
}

// The chunk's K/V rows go to the exporter; a prompt that reused a prefix exports it too (its
// pages hold it), in pieces of at most 512 tokens, before its first chunk.
void StageLoop::export_kv(const sched::MicroBatch& mb) {
  constexpr int kPrefixPiece = 512;
  trace::Timeline::Scope span(ctx_.timeline, EventKind::kKvExport, mb);
  const bool to_checkpoint = feeds_checkpoint(mb);
  if (mb.is_first)
    for (int64_t at = 0; at < mb.start; at += kPrefixPiece)
      export_kv_rows(mb.prompt, at, static_cast<int>(std::min<int64_t>(kPrefixPiece, mb.start - at)), false,
                     to_checkpoint);
  export_kv_rows(mb.prompt, mb.start, mb.length, mb.is_last, to_checkpoint);
}

// Rows copied out of the pool for the exporter's writer thread (the copy is the only part on
// this thread: 2 x layers x kv_heads x count x head_dim floats, 11.8 MB for a 512-token chunk
// of SmolLM2's 15-layer stage, 512 MiB for 2048 tokens of Llama-3-8B at pp 1).
void StageLoop::export_kv_rows(int prompt, int64_t start, int count, bool is_last, bool to_checkpoint) {
  CheckpointRun* checkpoint =
      to_checkpoint && start + count > ctx_.checkpoint->handed(prompt) ? ctx_.checkpoint : nullptr;
  kv::KvExporter* exporters[] = {ctx_.kv_export, ctx_.kv_store ? &ctx_.kv_store->exporter() : nullptr};
  // The store keeps a prefix taken from another entry in that entry: its rows are not copied.
  if (exporters[1] && start + count <= exporters[1]->first_position(prompt)) exporters[1] = nullptr;
  if (!exporters[0] && !exporters[1] && !checkpoint) return;
  const kv::KvExportLayout& layout =
      checkpoint ? checkpoint->layout() : (exporters[0] ? *exporters[0] : *exporters[1]).layout();
  // With CP the rows are spread over the group: read_kv gathers them to CP rank 0 (every CP
  // rank calls it), which exports them as one rank would.
  const bool exports_here = topo_.cp_rank == 0;
  const size_t floats =
      exports_here ? static_cast<size_t>(layout.layers) * layout.kv_heads * count * layout.head_dim : 0;
  std::vector<float> keys(floats), values(layout.latent ? 0 : floats);
  ctx_.compute.read_kv(prompt, start, count, keys.data(), values.data());
  if (!exports_here) {  // (what the checkpoint's writer has is counted alike on every CP rank)
    if (checkpoint) checkpoint->feed(prompt, start, count, {}, {}, is_last);
    return;
  }
  dist::WaitLabel label(stage_name_ + " queueing the KV export of prompt " + std::to_string(prompt) +
                        " (the disk is behind)");
  for (kv::KvExporter* exporter : exporters)
    if (exporter) exporter->add_chunk(prompt, start, count, keys, values, is_last);
  if (checkpoint) checkpoint->feed(prompt, start, count, std::move(keys), std::move(values), is_last);
}

// A prefix from the KV store: this rank's rows of the entry go into the prompt's pages, in
// pieces of about 512 tokens (with CP, each rank keeps its share of each piece), before its
// first chunk is computed on them.
void StageLoop::load_prefix(const sched::MicroBatch& mb) {
  const int piece = sched::cp_load_piece(512, topo_.cp);
  const sched::PrefixReuse& reuse = ctx_.plan.reuse[mb.prompt];
  trace::Timeline::Scope span(ctx_.timeline, EventKind::kKvLoad, mb);
  dist::WaitLabel label(stage_name_ + " loading the first " + std::to_string(reuse.tokens) + " tokens of prompt " +
                        std::to_string(mb.prompt) + " from the KV store");
  std::vector<float> keys, values;
  for (int64_t at = 0; at < reuse.tokens; at += piece) {
    const int count = static_cast<int>(std::min<int64_t>(piece, reuse.tokens - at));
    const kv::KvExportLayout& layout = ctx_.kv_store->exporter().layout();
    const size_t floats = static_cast<size_t>(layout.layers) * layout.kv_heads * count * layout.head_dim;
    keys.resize(floats);
    values.resize(layout.latent ? 0 : floats);
    // The file was checked before the plan; if it fails now (deleted, a disk error), this
    // stage cannot make those rows in any other way: the job ends, naming it.
    try {
      ctx_.kv_store->read_prefix(reuse.store_entry, at, count, keys.data(), values.data());
    } catch (const std::exception& e) {
      fail_library_call("pipefill", "loading a prefix from --kv-store", e.what(), __FILE__, __LINE__);
    }
    ctx_.compute.write_kv(mb.prompt, at, count, keys.data(), values.data());
  }
}

void StageLoop::send_forward(long long i, dist::ReadySlot state) {
  const sched::MicroBatch& mb = mbs_[i];
  sends_.push_back(transport_.send(std::move(state), rows(mb) * ctx_.hidden_size, dist::tag_of(i)));
  result_.traffic.p2p_bytes_sent += 4.0 * rows(mb) * ctx_.hidden_size;
  // Commit finished sends early (cheap), and block only when the ring is full.
  while (!sends_.empty() && (sends_.size() > static_cast<size_t>(depth_) || sends_.front().done())) {
    trace::Timeline::Scope commit(ctx_.timeline, EventKind::kSendCommit, mb);
    dist::WaitLabel label(stage_name_ + " committing a send to rank " + std::to_string(topo_.next_rank) +
                          " (the ring is full at " + describe(mb) + ")");
    sends_.front().commit();
    sends_.pop_front();
  }
}

// The last stage: every position's scores (--logprobs, --top-k) and, on a prompt's last
// chunk, the LM head on its last position, gathered and sent to rank 0. The slot goes back
// to the pool either way.
void StageLoop::emit_results(const sched::MicroBatch& mb, dist::ReadySlot state) {
  const float* rows = rows_read_in(mb, state.data());  // the last rows_read(mb) of the chunk
  if (hidden_rows_) hidden_rows_->take(mb, rows, rows_read(mb));
  if (!mb.is_last && !scorer_) {
    transport_.release(std::move(state));
    return;
  }
  trace::Timeline::Scope head(ctx_.timeline, EventKind::kLmHead, mb);
  dist::WaitLabel label(stage_name_ + " computing and sending the results of " + describe(mb));
  const float* token_part = scorer_ ? scorer_->score(mb, rows, ctx_.hidden_size).data() : nullptr;  // (every row)
  if (mb.is_last)
    ctx_.compute.lm_head(rows + static_cast<int64_t>(rows_read(mb) - 1) * ctx_.hidden_size, logits_shard_.data());
  sender_->send(mb, token_part, logits_shard_, hidden_rows_ ? hidden_rows_->row() : nullptr,
                [&] { return ctx_.timeline.now(); });
  transport_.release(std::move(state));
}

// The rows read (rows_read: every row with token scores or mean hidden states, else a
// prompt's last row on its last chunk) go from the CP ranks that hold them (of their two
// pieces) to CP rank 0, which puts them in position order at the front of its slot (sized
// for a whole chunk only where every row is read): the results are then computed as
// without CP. None for a chunk whose rows nobody reads.
void StageLoop::gather_cp_rows(const sched::MicroBatch& mb, float* state) {
  trace::Timeline::Scope span(ctx_.timeline, EventKind::kCpGather, mb);
  dist::WaitLabel label(stage_name_ + " gathering the CP ranks' rows of " + describe(mb));
  ctx_.compute.gather_cp_rows(state, mb.start, mb.length, rows_read(mb));  // (host or device memory: the backend's)
}

void StageLoop::finish_micro_batch(const sched::MicroBatch& mb) {
  record_device_spans(false);
  if (inbox_) inbox_->poll();
  if (ctx_.checkpoint) ctx_.checkpoint->poll();
  if (ctx_.progress) {
    ++done_.micro_batches;  // stage 0 walks the plan in order: micro-batches 0..i are done
    done_.tokens += mb.length;
    ctx_.progress->update(done_);
  }
}

// Keeps receives posted for [next micro-batch to take, end), so a sender never waits for us.
void StageLoop::post_receives_until(long long end) {
  if (topo_.first_stage()) return;
  for (; next_to_post_ < end; ++next_to_post_)
    receives_.push_back(
        transport_.post_recv(rows(mbs_[next_to_post_]) * ctx_.hidden_size, dist::tag_of(next_to_post_)));
}

void StageLoop::apply_cutoff(long long cutoff) {
  // A stop after the last prompt has started cuts nothing: the run completes as planned.
  if (cutoff < count_) result_.stopped = true;
  count_ = std::min(count_, cutoff);
  while (!receives_.empty() && next_to_post_ - 1 >= count_) {  // posted for a micro-batch that will not run
    receives_.back().cancel();
    receives_.pop_back();
    --next_to_post_;
  }
  if (inbox_) inbox_->truncate(count_);
}

void StageLoop::record_device_spans(bool wait_for_all) {
  if (!device_timed_) return;
  spans_.clear();
  ctx_.compute.take_finished_spans(spans_, wait_for_all);
  for (const auto& span : spans_)
    ctx_.timeline.record(EventKind::kCompute, mbs_[span.micro_batch], span.start_s, span.end_s);
}

// The TP reducer's host spans become all-reduce events of `mb`; its payload, traffic.
void StageLoop::record_all_reduces(const sched::MicroBatch& mb) {
  dist::TpAllReduce* const reducer = ctx_.all_reduce;
  if (!reducer) return;
  for (const dist::HostSpan& span : reducer->take_spans())
    ctx_.timeline.record(EventKind::kAllReduce, mb, ctx_.timeline.to_run_time(span.start_s),
                         ctx_.timeline.to_run_time(span.end_s));
  result_.traffic.allreduce_payload_bytes += static_cast<double>(reducer->payload_bytes() - reduced_bytes_);
  reduced_bytes_ = reducer->payload_bytes();
}

}  // namespace

LoopResult run_stage_loop(StageLoopContext& context) {
  return StageLoop(context).run();
}

}  // namespace pf::pipeline
