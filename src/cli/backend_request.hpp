// The backend a run or a profile asks for, from the placement options: one builder, so
// `run` and `profile` cannot drift apart on what they pass (what differs, the cost source
// and the profiling room, the caller adds by name).
#pragma once

#include "cli/options.hpp"
#include "pipeline/backend_setup.hpp"

namespace pf::cli {

// `max_chunk_tokens`: the workspace a backend reserves before its KV pool is sized.
pipeline::BackendRequest backend_request(const PlacementOptions& placement, int page_size, int max_chunk_tokens);

}  // namespace pf::cli
