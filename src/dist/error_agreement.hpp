// Turning one rank's user error into a clean exit of every rank. Any rank may find a
// problem (its weight shard is malformed, say); all ranks meet here, learn whether anyone
// failed, and rank 0 receives the first failing rank's message to print. Nobody is left
// waiting in a collective the failed rank will never join.
#pragma once

#include <mpi.h>

#include <optional>
#include <string>

namespace pf::dist {

// Collective over `comm`. Returns the message of the lowest failing rank on rank 0, a
// non-empty placeholder elsewhere when some rank failed, and nullopt when none did.
std::optional<std::string> agree_on_errors(const std::optional<std::string>& local_error, MPI_Comm comm);

}  // namespace pf::dist
