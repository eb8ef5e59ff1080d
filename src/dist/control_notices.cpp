// Rank 0's notices (see control_notices.hpp): five MPI_LONG_LONGs from rank 0 to each other rank.
#include "dist/control_notices.hpp"

#include <stdexcept>
#include <vector>

#include "dist/wait.hpp"
#include "errors.hpp"

namespace pf::dist {
namespace {

// The control communicator's tags: these two, and control_reports.cpp's 9002.
constexpr int kNoticeTag = 9001;       // rank 0's notices
constexpr int kStopRequestTag = 9003;  // the other ranks' stop requests to rank 0
constexpr long long kStop = 1, kCheckpoint = 2, kEnd = 3;

int rank_in(MPI_Comm comm) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  return rank;
}

}  // namespace

ControlNotices::ControlNotices(MPI_Comm control_comm)
    : comm_(control_comm), announcer_(rank_in(control_comm) == kAnnouncer) {
  if (!announcer_)
    MPI_CHECK(MPI_Irecv(incoming_.data(), static_cast<int>(incoming_.size()), MPI_LONG_LONG, kAnnouncer, kNoticeTag,
                        comm_, &listening_));
}

ControlNotices::~ControlNotices() {
  if (announcer_) {  // requests that came too late to matter: received, so none is left unmatched
    while (receive_stop_request()) {
    }
    return;
  }
  if (listening_ == MPI_REQUEST_NULL) return;
  MPI_CHECK(MPI_Cancel(&listening_));  // nothing more came; a notice racing in completes it instead
  wait_polling(&listening_);
}

void ControlNotices::send_to_all(const Message& message) {
  if (!announcer_ || ended_)
    throw std::logic_error("control notices: a notice after the stop or the end, or not by rank 0");
  int size = 1;
  MPI_CHECK(MPI_Comm_size(comm_, &size));
  std::vector<MPI_Request> sent(size, MPI_REQUEST_NULL);
  for (int rank = 0; rank < size; ++rank)
    if (rank != kAnnouncer)
      MPI_CHECK(MPI_Isend(message.data(), static_cast<int>(message.size()), MPI_LONG_LONG, rank, kNoticeTag, comm_,
                          &sent[rank]));
  for (auto& request : sent) wait_polling(&request);  // eager: done as soon as it is buffered
}

void ControlNotices::announce(long long cutoff, long long last_call) {
  send_to_all({kStop, cutoff, last_call, 0, 0});
  announced_ = ended_ = true;
}

void ControlNotices::announce_end(long long last_call) {
  send_to_all({kEnd, last_call, 0, 0, 0});
  ended_ = true;
}

void ControlNotices::announce_checkpoint(const CheckpointCall& call) {
  send_to_all({kCheckpoint, call.sequence, call.cutoff, call.prompt, call.tokens});
}

void ControlNotices::receive_arrived() {
  while (listening_ != MPI_REQUEST_NULL) {
    int done = 0;
    MPI_CHECK(MPI_Test(&listening_, &done, MPI_STATUS_IGNORE));
    if (!done) return;
    if (incoming_[0] == kStop || incoming_[0] == kEnd) {  // the last notice: nothing more is received
      if (incoming_[0] == kStop) stop_ = incoming_[1];
      last_call_ = incoming_[0] == kStop ? incoming_[2] : incoming_[1];
      return;
    }
    calls_.push_back({incoming_[1], incoming_[2], incoming_[3], incoming_[4]});
    MPI_CHECK(MPI_Irecv(incoming_.data(), static_cast<int>(incoming_.size()), MPI_LONG_LONG, kAnnouncer, kNoticeTag,
                        comm_, &listening_));
  }
}

std::optional<long long> ControlNotices::take() {
  receive_arrived();
  if (taken_ || !stop_) return std::nullopt;
  taken_ = true;
  return stop_;
}

std::optional<CheckpointCall> ControlNotices::take_checkpoint() {
  receive_arrived();
  if (calls_.empty()) return std::nullopt;
  CheckpointCall call = calls_.front();
  calls_.pop_front();
  return call;
}

std::optional<long long> ControlNotices::last_call() {
  receive_arrived();
  return last_call_;
}

void ControlNotices::request_stop() {
  if (announcer_ || stop_asked_) return;
  stop_asked_ = true;
  long long ask = 1;
  MPI_Request sent = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Isend(&ask, 1, MPI_LONG_LONG, kAnnouncer, kStopRequestTag, comm_, &sent));
  wait_polling(&sent);  // eager: done as soon as it is buffered
}

bool ControlNotices::receive_stop_request() {
  int waiting = 0;
  MPI_Status status;
  MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, kStopRequestTag, comm_, &waiting, &status));
  if (!waiting) return false;
  long long ask = 0;
  MPI_CHECK(MPI_Recv(&ask, 1, MPI_LONG_LONG, status.MPI_SOURCE, kStopRequestTag, comm_, MPI_STATUS_IGNORE));
  return true;
}

bool ControlNotices::stop_requested_elsewhere() {
  if (announcer_ && !stop_asked_) stop_asked_ = receive_stop_request();
  return stop_asked_;
}

bool ControlNotices::raised() {
  receive_arrived();
  return !taken_ && stop_.has_value();
}

}  // namespace pf::dist
