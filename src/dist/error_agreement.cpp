// agree_on_errors: MIN-reduce of failing ranks, then one message to rank 0.
#include "dist/error_agreement.hpp"

#include <vector>

#include "dist/collectives.hpp"
#include "errors.hpp"

namespace pf::dist {

std::optional<std::string> agree_on_errors(const std::optional<std::string>& local_error, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  int mine = local_error ? rank : size, first = size;
  MPI_Request request;
  MPI_CHECK(MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm, &request));
  wait_polling(&request);
  if (first == size) return std::nullopt;
  if (first == 0) return rank == 0 ? *local_error : std::string("(reported by rank 0)");
  constexpr int kTag = 7001;
  if (rank == first) {
    const std::string& text = *local_error;
    MPI_CHECK(MPI_Send(text.data(), static_cast<int>(text.size()), MPI_CHAR, 0, kTag, comm));
  }
  if (rank == 0) {
    MPI_Status status;
    MPI_CHECK(MPI_Probe(first, kTag, comm, &status));
    int length = 0;
    MPI_CHECK(MPI_Get_count(&status, MPI_CHAR, &length));
    std::string text(static_cast<size_t>(length), '\0');
    MPI_CHECK(MPI_Recv(text.data(), length, MPI_CHAR, first, kTag, comm, MPI_STATUS_IGNORE));
    return text + " (on rank " + std::to_string(first) + ")";
  }
  return std::string("(reported by rank " + std::to_string(first) + ")");
}

}  // namespace pf::dist
