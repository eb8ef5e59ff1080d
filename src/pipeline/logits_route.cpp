// Result routing: TP gather of the logits on the last stage, then last stage -> writer.
// One message per prompt: [logits: vocab][hidden state: hidden_width][TTFT: a double].
#include "pipeline/logits_route.hpp"

#include <algorithm>
#include <cstring>

#include "dist/collectives.hpp"
#include "errors.hpp"
#include "model/weights.hpp"

namespace pf::pipeline {

namespace {

constexpr int kLogitsDepth = 2;   // receives kept posted on the writer
constexpr int kTrailerFloats = 2;  // the TTFT, a double, rides after the rows

void put_ttft(dist::Buffer& row, int at, double ttft) { std::memcpy(row.data() + at, &ttft, sizeof ttft); }
double get_ttft(const float* row, int at) {
  double ttft;
  std::memcpy(&ttft, row + at, sizeof ttft);
  return ttft;
}
const float* hidden_part(const float* message, int vocab, int hidden_width) {
  return hidden_width > 0 ? message + vocab : nullptr;
}

}  // namespace

LogitsSender::LogitsSender(const dist::Topology& topology, int vocab_size, int hidden_width, LogitsSink local_sink)
    : topology_(topology), vocab_size_(vocab_size), hidden_width_(hidden_width), local_sink_(std::move(local_sink)) {
  for (int r = 0; r < topology.tp; ++r) {
    const model::VocabSlice slice = model::vocab_slice(vocab_size, topology.tp, r);
    counts_.push_back(slice.count);
    displacements_.push_back(slice.begin);
  }
}

void LogitsSender::send(int prompt, const std::vector<float>& shard, const float* hidden_row,
                        const std::function<double()>& now) {
  const int count = vocab_size_ + hidden_width_ + kTrailerFloats;
  dist::Buffer row(topology_.tp_rank == 0 ? count : 0);
  MPI_Request request;
  MPI_CHECK(MPI_Igatherv(shard.data(), counts_[topology_.tp_rank], MPI_FLOAT, row.data(), counts_.data(),
                         displacements_.data(), MPI_FLOAT, 0, topology_.tp_comm, &request));
  dist::wait_polling(&request);
  if (topology_.tp_rank != 0) return;
  const double ttft = now();
  // Hidden states are the same on every TP rank after the all-reduces: TP rank 0's row is the row.
  if (hidden_width_ > 0) std::memcpy(row.data() + vocab_size_, hidden_row, sizeof(float) * hidden_width_);
  if (topology_.is_writer()) {
    local_sink_(prompt, row.data(), hidden_part(row.data(), vocab_size_, hidden_width_), ttft);
    return;
  }
  put_ttft(row, vocab_size_ + hidden_width_, ttft);
  pending_.push_back(dist::PendingSend::start(std::move(row), count, 0, dist::tag_of(prompt), topology_.result_comm));
  while (!pending_.empty() && pending_.front().test()) {
    pending_.front().commit();
    pending_.pop_front();
  }
}

void LogitsSender::flush() {
  for (auto& send : pending_) send.commit();
  pending_.clear();
}

LogitsInbox::LogitsInbox(const dist::Topology& topology, const sched::BatchPlan& plan, int vocab_size, int hidden_width,
                         LogitsSink sink)
    : topology_(topology), vocab_size_(vocab_size), hidden_width_(hidden_width), sink_(std::move(sink)) {
  for (const auto& mb : plan.micro_batches)
    if (mb.is_last) completion_order_.push_back(mb.prompt);
  while (posted_.size() < kLogitsDepth && next_to_post_ < completion_order_.size()) post_next();
}

void LogitsInbox::post_next() {
  const int prompt = completion_order_[next_to_post_++];
  const int count = vocab_size_ + hidden_width_ + kTrailerFloats;
  posted_.emplace_back(prompt, dist::PostedRecv::post(dist::Buffer(count), count, topology_.last_stage_leader(),
                                                      dist::tag_of(prompt), topology_.result_comm));
}

void LogitsInbox::poll() {
  while (!posted_.empty() && posted_.front().second.test()) {
    deliver_front();
  }
}

void LogitsInbox::drain() {
  dist::WaitLabel label("the logits of the remaining prompts from rank " + std::to_string(topology_.last_stage_leader()));
  while (!posted_.empty()) deliver_front();
}

void LogitsInbox::deliver_front() {
  auto [prompt, recv] = std::move(posted_.front());
  posted_.pop_front();
  const dist::Buffer row = recv.wait();
  sink_(prompt, row.data(), hidden_part(row.data(), vocab_size_, hidden_width_),
        get_ttft(row.data(), vocab_size_ + hidden_width_));
  if (next_to_post_ < completion_order_.size()) post_next();
}

void LogitsInbox::truncate(const sched::BatchPlan& plan, long long cutoff) {
  // Prompts complete in the order of their last chunks, so the ones that still will are a
  // prefix of completion_order_; posted receives cover indices [next - posted, next).
  size_t keep = 0;
  for (long long i = 0; i < cutoff && i < static_cast<long long>(plan.micro_batches.size()); ++i)
    keep += plan.micro_batches[i].is_last ? 1 : 0;
  while (!posted_.empty() && next_to_post_ > keep) {
    posted_.back().second.cancel();
    posted_.pop_back();
    --next_to_post_;
  }
  completion_order_.resize(std::min(keep, completion_order_.size()));
}

}  // namespace pf::pipeline
