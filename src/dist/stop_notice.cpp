// The stop notice (see stop_notice.hpp): one MPI_LONG_LONG from rank 0 to each other rank.
#include "dist/stop_notice.hpp"

#include <stdexcept>
#include <vector>

#include "dist/wait.hpp"
#include "errors.hpp"

namespace pf::dist {
namespace {

constexpr int kStopTag = 9001;  // the control communicator carries nothing else

int rank_in(MPI_Comm comm) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  return rank;
}

}  // namespace

StopNotice::StopNotice(MPI_Comm control_comm) : comm_(control_comm), announcer_(rank_in(control_comm) == kAnnouncer) {
  if (!announcer_) MPI_CHECK(MPI_Irecv(&incoming_, 1, MPI_LONG_LONG, kAnnouncer, kStopTag, comm_, &listening_));
}

StopNotice::~StopNotice() {
  if (listening_ == MPI_REQUEST_NULL) return;
  MPI_CHECK(MPI_Cancel(&listening_));  // no stop came; a notice racing in completes it instead
  wait_polling(&listening_);
}

void StopNotice::announce(long long cutoff) {
  if (!announcer_ || announced_) throw std::logic_error("stop notice: announced twice, or not by rank 0");
  announced_ = true;
  int size = 1;
  MPI_CHECK(MPI_Comm_size(comm_, &size));
  std::vector<MPI_Request> sent(size, MPI_REQUEST_NULL);
  for (int rank = 0; rank < size; ++rank)
    if (rank != kAnnouncer) MPI_CHECK(MPI_Isend(&cutoff, 1, MPI_LONG_LONG, rank, kStopTag, comm_, &sent[rank]));
  for (auto& request : sent) wait_polling(&request);  // eager: done as soon as it is buffered
}

bool StopNotice::arrived() {
  if (!arrived_ && listening_ != MPI_REQUEST_NULL) {
    int done = 0;
    MPI_CHECK(MPI_Test(&listening_, &done, MPI_STATUS_IGNORE));
    arrived_ = done != 0;
  }
  return arrived_;
}

std::optional<long long> StopNotice::take() {
  if (taken_ || !arrived()) return std::nullopt;
  taken_ = true;
  return incoming_;
}

bool StopNotice::raised() { return !taken_ && arrived(); }

}  // namespace pf::dist
