// Logits routing: TP gather on the last stage, then last stage -> writer.
#include "pipeline/logits_route.hpp"

#include "dist/collectives.hpp"
#include "errors.hpp"
#include "model/weights.hpp"

namespace pf::pipeline {

namespace {
constexpr int kLogitsDepth = 2;  // receives kept posted on the writer
}

LogitsSender::LogitsSender(const dist::Topology& topology, int vocab_size, LogitsSink local_sink)
    : topology_(topology), vocab_size_(vocab_size), local_sink_(std::move(local_sink)) {
  for (int r = 0; r < topology.tp; ++r) {
    const model::VocabSlice slice = model::vocab_slice(vocab_size, topology.tp, r);
    counts_.push_back(slice.count);
    displacements_.push_back(slice.begin);
  }
}

void LogitsSender::send(int prompt, const std::vector<float>& shard) {
  dist::Buffer row(topology_.tp_rank == 0 ? vocab_size_ : 0);
  MPI_Request request;
  MPI_CHECK(MPI_Igatherv(shard.data(), counts_[topology_.tp_rank], MPI_FLOAT, row.data(), counts_.data(),
                         displacements_.data(), MPI_FLOAT, 0, topology_.tp_comm, &request));
  dist::wait_polling(&request);
  if (topology_.tp_rank != 0) return;
  if (topology_.is_writer()) {
    local_sink_(prompt, row.data());
    return;
  }
  pending_.push_back(
      dist::PendingSend::start(std::move(row), vocab_size_, 0, dist::tag_of(prompt), topology_.result_comm));
  while (!pending_.empty() && pending_.front().test()) {
    pending_.front().commit();
    pending_.pop_front();
  }
}

void LogitsSender::flush() {
  for (auto& send : pending_) send.commit();
  pending_.clear();
}

LogitsInbox::LogitsInbox(const dist::Topology& topology, const sched::BatchPlan& plan, int vocab_size, LogitsSink sink)
    : topology_(topology), vocab_size_(vocab_size), sink_(std::move(sink)) {
  for (const auto& mb : plan.micro_batches)
    if (mb.is_last) completion_order_.push_back(mb.prompt);
  while (posted_.size() < kLogitsDepth && next_to_post_ < completion_order_.size()) post_next();
}

void LogitsInbox::post_next() {
  const int prompt = completion_order_[next_to_post_++];
  posted_.emplace_back(prompt,
                       dist::PostedRecv::post(dist::Buffer(vocab_size_), vocab_size_, topology_.last_stage_leader(),
                                              dist::tag_of(prompt), topology_.result_comm));
}

void LogitsInbox::poll() {
  while (!posted_.empty() && posted_.front().second.test()) {
    auto [prompt, recv] = std::move(posted_.front());
    posted_.pop_front();
    sink_(prompt, recv.wait().data());
    if (next_to_post_ < completion_order_.size()) post_next();
  }
}

void LogitsInbox::drain() {
  while (!posted_.empty()) {
    auto [prompt, recv] = std::move(posted_.front());
    posted_.pop_front();
    sink_(prompt, recv.wait().data());
    if (next_to_post_ < completion_order_.size()) post_next();
  }
}

}  // namespace pf::pipeline
