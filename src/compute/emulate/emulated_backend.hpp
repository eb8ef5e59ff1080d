// The emulate backend's factory: a stage whose compute sleeps what `cost` predicts, with
// MPI transport of host buffers of the real message sizes. It holds no weights and no KV
// memory, so it has no capacity rule: its capacity is the room a profile asks for.
#pragma once

#include <cstdint>
#include <string>

#include "compute/stage_backend.hpp"
#include "dist/topology.hpp"
#include "sim/stage_costs.hpp"

namespace pf::compute {

// `cost`: this rank's stage; `description`: where the cost comes from, for the run's banner.
StageBackend make_emulated_backend(const dist::Topology& topology, const sim::StageCost& cost, int vocab_shard,
                                    int64_t profile_room_tokens, const std::string& description);

}  // namespace pf::compute
