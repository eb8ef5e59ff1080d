// Texts to rank 0 (see control_reports.hpp).
#include "dist/control_reports.hpp"

#include "dist/wait.hpp"
#include "errors.hpp"

namespace pf::dist {
namespace {
constexpr int kReportTag = 9002;
}

ControlReports::~ControlReports() {
  for (Sending& s : sending_) wait_polling(&s.request);
}

void ControlReports::send(std::string text) {
  // Finished sends leave first (a deque keeps the texts of those in flight where MPI reads them).
  while (!sending_.empty()) {
    int done = 0;
    MPI_CHECK(MPI_Test(&sending_.front().request, &done, MPI_STATUS_IGNORE));
    if (!done) break;
    sending_.pop_front();
  }
  sending_.push_back({std::move(text), MPI_REQUEST_NULL});
  Sending& s = sending_.back();
  MPI_CHECK(
      MPI_Isend(s.text.data(), static_cast<int>(s.text.size()), MPI_CHAR, kReader, kReportTag, comm_, &s.request));
}

std::vector<std::pair<int, std::string>> ControlReports::arrived() {
  std::vector<std::pair<int, std::string>> reports;
  for (;;) {
    int flag = 0;
    MPI_Status status;
    MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, kReportTag, comm_, &flag, &status));
    if (!flag) return reports;
    int bytes = 0;
    MPI_CHECK(MPI_Get_count(&status, MPI_CHAR, &bytes));
    std::string text(static_cast<size_t>(bytes), '\0');
    MPI_CHECK(MPI_Recv(text.data(), bytes, MPI_CHAR, status.MPI_SOURCE, kReportTag, comm_, MPI_STATUS_IGNORE));
    reports.emplace_back(status.MPI_SOURCE, std::move(text));
  }
}

}  // namespace pf::dist
