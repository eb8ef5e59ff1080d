// Result routing: the message layout, the TP gather of the logits on the last stage, then
// last stage -> writer (see result_route.hpp).
#include "pipeline/result_route.hpp"

#include <algorithm>
#include <cstring>

#include "dist/collectives.hpp"
#include "dist/wait.hpp"
#include "errors.hpp"
#include "model/weights.hpp"

namespace pf::pipeline {

namespace {

constexpr int kResultDepth = 2;    // receives kept posted on the writer
constexpr int kTrailerFloats = 2;  // the TTFT, a double, rides after the rows

// The layout of one micro-batch's message.
struct MessageLayout {
  int token_floats = 0;   // the chunk's token rows
  int prompt_floats = 0;  // logits + hidden state + TTFT (the prompt's last chunk)

  MessageLayout(const sched::MicroBatch& mb, int vocab, int hidden_width, TokenRowLayout rows)
      : token_floats(mb.length * rows.floats_per_token()),
        prompt_floats(mb.is_last ? vocab + hidden_width + kTrailerFloats : 0) {}
  int total() const { return token_floats + prompt_floats; }
};

// Micro-batches that produce a message: every chunk when token rows are asked for, else
// each prompt's last chunk.
bool has_results(const sched::MicroBatch& mb, TokenRowLayout rows) {
  return mb.is_last || rows.any();
}

// `ids` receives the top-k ids, copied out of the float message (they travel as int32 bits).
TokenRows token_rows_of(const sched::MicroBatch& mb, TokenRowLayout layout, const float* part,
                        std::vector<int32_t>& ids) {
  TokenRows rows;
  rows.prompt = mb.prompt;
  rows.start = mb.start;
  rows.count = mb.length;
  rows.shape = layout;
  const float* at = part;
  if (layout.logprobs) {
    rows.data.logprobs = at;
    at += mb.length;
  }
  if (layout.top_k > 0) {
    const size_t count = static_cast<size_t>(mb.length) * layout.top_k;
    rows.data.topk_logprobs = at;
    ids.resize(count);
    std::memcpy(ids.data(), at + count, sizeof(int32_t) * count);
    rows.data.topk_ids = ids.data();
    at += 2 * count;
  }
  if (layout.set_size > 0) rows.data.set_logprobs = at;
  return rows;
}

void put_ttft(float* at, double ttft) {
  std::memcpy(at, &ttft, sizeof ttft);
}
double get_ttft(const float* at) {
  double ttft;
  std::memcpy(&ttft, at, sizeof ttft);
  return ttft;
}

// Hands one message's results to the sink: the token rows, then (last chunk) the prompt's row.
void deliver(const sched::MicroBatch& mb, int vocab, int hidden_width, TokenRowLayout rows, const float* message,
             ResultSink& sink) {
  const MessageLayout layout(mb, vocab, hidden_width, rows);
  if (rows.any()) {
    std::vector<int32_t> ids;
    sink.token_rows(token_rows_of(mb, rows, message, ids));
  }
  if (!mb.is_last) return;
  const float* logits = message + layout.token_floats;
  sink.prompt_row(mb.prompt, logits, hidden_width > 0 ? logits + vocab : nullptr,
                  get_ttft(logits + vocab + hidden_width));
}

}  // namespace

ResultSender::ResultSender(const dist::Topology& topology, int vocab_size, int hidden_width, TokenRowLayout token_rows,
                           ResultSink& local_sink)
    : topology_(topology),
      vocab_size_(vocab_size),
      hidden_width_(hidden_width),
      token_rows_(token_rows),
      local_sink_(local_sink) {
  for (int r = 0; r < topology.tp; ++r) {
    const model::VocabSlice slice = model::vocab_slice(vocab_size, topology.tp, r);
    counts_.push_back(slice.count);
    displacements_.push_back(slice.begin);
  }
}

void ResultSender::send(const sched::MicroBatch& mb, const float* token_part, const std::vector<float>& shard,
                        const float* hidden_row, const std::function<double()>& now) {
  if (!has_results(mb, token_rows_)) return;
  const MessageLayout layout(mb, vocab_size_, hidden_width_, token_rows_);
  dist::Buffer message(topology_.tp_rank == 0 ? layout.total() : 0);
  if (mb.is_last) {
    MPI_Request request;
    float* logits = topology_.tp_rank == 0 ? message.data() + layout.token_floats : nullptr;  // root only
    MPI_CHECK(MPI_Igatherv(shard.data(), counts_[topology_.tp_rank], MPI_FLOAT, logits, counts_.data(),
                           displacements_.data(), MPI_FLOAT, 0, topology_.tp_comm, &request));
    dist::wait_polling(&request);
  }
  if (topology_.tp_rank != 0) return;
  if (layout.token_floats > 0) std::memcpy(message.data(), token_part, sizeof(float) * layout.token_floats);
  if (mb.is_last) {
    float* after_logits = message.data() + layout.token_floats + vocab_size_;
    // Hidden states are the same on every TP rank after the all-reduces: TP rank 0's row is the row.
    if (hidden_width_ > 0) std::memcpy(after_logits, hidden_row, sizeof(float) * hidden_width_);
    put_ttft(after_logits + hidden_width_, now());
  }
  if (topology_.is_writer()) {
    deliver(mb, vocab_size_, hidden_width_, token_rows_, message.data(), local_sink_);
    return;
  }
  pending_.push_back(
      dist::PendingSend::start(std::move(message), layout.total(), 0, dist::tag_of(mb.index), topology_.result_comm));
  while (!pending_.empty() && pending_.front().test()) {
    pending_.front().commit();
    pending_.pop_front();
  }
}

void ResultSender::flush() {
  for (auto& send : pending_) send.commit();
  pending_.clear();
}

ResultInbox::ResultInbox(const dist::Topology& topology, const sched::BatchPlan& plan, int vocab_size, int hidden_width,
                         TokenRowLayout token_rows, ResultSink& sink)
    : topology_(topology),
      plan_(plan),
      vocab_size_(vocab_size),
      hidden_width_(hidden_width),
      token_rows_(token_rows),
      sink_(sink) {
  for (const auto& mb : plan.micro_batches)
    if (has_results(mb, token_rows)) senders_.push_back(mb.index);
  while (posted_.size() < kResultDepth && next_to_post_ < senders_.size()) post_next();
}

void ResultInbox::post_next() {
  const int index = senders_[next_to_post_++];
  const int count = MessageLayout(plan_.micro_batches[index], vocab_size_, hidden_width_, token_rows_).total();
  posted_.emplace_back(index, dist::PostedRecv::post(dist::Buffer(count), count, topology_.last_stage_leader(),
                                                     dist::tag_of(index), topology_.result_comm));
}

void ResultInbox::poll() {
  while (!posted_.empty() && posted_.front().second.test()) deliver_front();
}

void ResultInbox::drain() {
  dist::WaitLabel label("the results of the remaining prompts from rank " +
                        std::to_string(topology_.last_stage_leader()));
  while (!posted_.empty()) deliver_front();
}

void ResultInbox::deliver_front() {
  auto [index, recv] = std::move(posted_.front());
  posted_.pop_front();
  const dist::Buffer message = recv.wait();
  deliver(plan_.micro_batches[index], vocab_size_, hidden_width_, token_rows_, message.data(), sink_);
  if (next_to_post_ < senders_.size()) post_next();
}

void ResultInbox::truncate(long long cutoff) {
  // Messages come in plan order, so the ones that still will are those of micro-batches
  // before the cutoff, a prefix of senders_; posted receives cover [next - posted, next).
  const size_t keep = static_cast<size_t>(
      std::lower_bound(senders_.begin(), senders_.end(), cutoff, [](int index, long long c) { return index < c; }) -
      senders_.begin());
  while (!posted_.empty() && next_to_post_ > keep) {
    posted_.back().second.cancel();
    posted_.pop_back();
    --next_to_post_;
  }
  senders_.resize(std::min(keep, senders_.size()));
}

}  // namespace pf::pipeline
