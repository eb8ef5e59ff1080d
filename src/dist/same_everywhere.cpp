// Agreement with rank 0 (see same_everywhere.hpp).
#include "dist/same_everywhere.hpp"

#include <unistd.h>

#include <sstream>
#include <vector>

#include "dist/checked_step.hpp"
#include "dist/collectives.hpp"

namespace pf::dist {
namespace {

std::string broadcast_text(const std::string& text, MPI_Comm comm) {
  std::vector<char> bytes(text.begin(), text.end());
  broadcast_bytes(bytes, 0, comm);
  return std::string(bytes.begin(), bytes.end());
}

std::string who(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  return "rank " + std::to_string(rank) + " (host " + host + ")";
}

std::string first_difference(const std::string& a, const std::string& b) {
  size_t at = 0;
  while (at < a.size() && at < b.size() && a[at] == b[at]) ++at;
  const size_t from = at > 40 ? at - 40 : 0;
  return "rank 0: ..." + a.substr(from, 80) + "..., here: ..." + b.substr(from, 80) + "...";
}

}  // namespace

void require_same_as_rank0(const std::string& text, const std::string& what, MPI_Comm comm) {
  const std::string root_text = broadcast_text(text, comm);
  checked_step(comm, [&] {
    if (text != root_text)
      throw UserError(who(comm) + " does not see the same " + what + " as rank 0 (" + first_difference(root_text, text) +
                      "): every rank must be launched with the same arguments on the same files");
  });
}

void require_table_entries_as_rank0(const std::string& table, const std::string& what,
                                    const std::function<bool(const std::string&)>& wanted,
                                    const std::function<std::string(const std::string&)>& mine, MPI_Comm comm) {
  const std::string root_table = broadcast_text(table, comm);
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  checked_step(comm, [&] {
    if (rank == 0) return;  // the reference: its values made the table
    std::istringstream lines(root_table);
    std::string key, value;
    while (lines >> key >> value) {
      if (!wanted(key)) continue;
      const std::string here = mine(key);
      if (here != value)
        throw UserError(who(comm) + " does not see the same " + what + " as rank 0 for " + key + " (rank 0: " + value +
                        ", here: " + here + "): a stale or different copy of the model on this node?");
    }
  });
}

}  // namespace pf::dist
