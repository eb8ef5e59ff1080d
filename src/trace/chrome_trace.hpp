// Chrome trace export (opens in Perfetto / chrome://tracing): one process per pipeline
// stage, one thread per TP rank, one complete ("X") event per timeline event.
#pragma once

#include <string>
#include <vector>

#include "trace/timeline.hpp"

namespace pf::trace {

void write_chrome_trace(const std::string& path, const std::vector<TimelineEvent>& events, int pp, int tp, int cp = 1);

}  // namespace pf::trace
