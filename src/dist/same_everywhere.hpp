// Set-up checks that every rank sees the same thing as rank 0: its options, the model's
// config, the fingerprints of the weights it will load. A heterogeneous launch (`mpirun ...
// : ...`) or a node with a stale copy of a checkpoint would otherwise mix two models
// silently, or crash when the shapes differ.
#pragma once

#include <mpi.h>

#include <functional>
#include <string>

namespace pf::dist {

// Collective over `comm`. Rank 0's `text` is sent to every rank; a rank whose own differs
// fails with a UserError that names it and its host and says what differs (`what`, and
// the first differing line). Every rank learns of the failure (dist/checked_step.hpp).
void require_same_as_rank0(const std::string& text, const std::string& what, MPI_Comm comm);

// Collective over `comm`. Rank 0's `table` (lines "key value") is sent to every rank; each
// rank calls `mine(key)` for the keys `wanted(key)` selects and compares. A missing key or
// another value fails the same way, naming the key.
void require_table_entries_as_rank0(const std::string& table, const std::string& what,
                                    const std::function<bool(const std::string&)>& wanted,
                                    const std::function<std::string(const std::string&)>& mine, MPI_Comm comm);

}  // namespace pf::dist
