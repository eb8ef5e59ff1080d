// Rank-0 decisions and reports (see root_decision.hpp).
#include "dist/root_decision.hpp"

#include "dist/checked_step.hpp"
#include "dist/collectives.hpp"
#include "errors.hpp"

namespace pf::dist {

namespace {
bool is_root(MPI_Comm comm) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  return rank == 0;
}
}  // namespace

std::string decide_on_root(MPI_Comm comm, const std::function<std::string()>& decide) {
  std::string text;
  checked_step(comm, [&] {
    if (is_root(comm)) text = decide();
  });
  std::vector<char> bytes(text.begin(), text.end());
  broadcast_bytes(bytes, 0, comm);
  return std::string(bytes.begin(), bytes.end());
}

RootOnly<std::vector<std::string>> gather_on_root(MPI_Comm comm, const std::string& mine) {
  const std::vector<std::vector<char>> blobs = gather_bytes(std::vector<char>(mine.begin(), mine.end()), 0, comm);
  if (!is_root(comm)) return {};
  std::vector<std::string> all;
  for (const auto& blob : blobs) all.emplace_back(blob.begin(), blob.end());
  return RootOnly<std::vector<std::string>>::on_root(std::move(all));
}

}  // namespace pf::dist
