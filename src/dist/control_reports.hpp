// Texts from any rank to rank 0 during the loop, without a collective: a rank sends when it has
// something to say (a checkpoint's part is on its disk), rank 0 reads whatever has arrived
// between micro-batches, or waits for what it still expects. The reverse of the notices
// (control_notices.hpp), on the same control communicator under a tag of its own.
#pragma once

#include <mpi.h>

#include <deque>
#include <string>
#include <utility>
#include <vector>

namespace pf::dist {

class ControlReports {
 public:
  static constexpr int kReader = 0;  // the rank of `control_comm` that reads them

  explicit ControlReports(MPI_Comm control_comm) : comm_(control_comm) {}
  ~ControlReports();  // waits for this rank's sends (tiny: they are buffered at once)
  ControlReports(const ControlReports&) = delete;
  ControlReports& operator=(const ControlReports&) = delete;

  // A rank other than the reader: starts sending `text` and returns.
  void send(std::string text);
  // The reader: every report that has arrived, as (rank, text), in arrival order per rank.
  std::vector<std::pair<int, std::string>> arrived();

 private:
  struct Sending {
    std::string text;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  MPI_Comm comm_;
  std::deque<Sending> sending_;
};

}  // namespace pf::dist
