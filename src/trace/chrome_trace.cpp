// Chrome trace JSON writer.
#include "trace/chrome_trace.hpp"

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "errors.hpp"
#include "io/durable_file.hpp"

namespace pf::trace {

void write_chrome_trace(const std::string& path, const std::vector<TimelineEvent>& events, int pp, int tp, int cp) {
  // One thread a rank of the stage: (cp rank, tp rank) in rank order.
  const int stage_ranks = cp * tp;
  nlohmann::json trace = nlohmann::json::array();
  for (int stage = 0; stage < pp; ++stage) {
    trace.push_back({{"name", "process_name"},
                     {"ph", "M"},
                     {"pid", stage},
                     {"args", {{"name", "stage " + std::to_string(stage)}}}});
    trace.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", stage}, {"args", {{"sort_index", stage}}}});
    for (int in_stage = 0; in_stage < stage_ranks; ++in_stage)
      trace.push_back({{"name", "thread_name"},
                       {"ph", "M"},
                       {"pid", stage},
                       {"tid", in_stage},
                       {"args",
                        {{"name", (cp > 1 ? "cp " + std::to_string(in_stage / tp) + " " : std::string()) + "tp " +
                                      std::to_string(in_stage % tp) + " (rank " +
                                      std::to_string(stage * stage_ranks + in_stage) + ")"}}}});
  }
  for (const auto& e : events) {
    const auto kind = static_cast<EventKind>(e.kind);
    std::string name = event_kind_name(kind);
    if (kind == EventKind::kCompute || kind == EventKind::kLmHead)
      name += " p" + std::to_string(e.prompt) + "[" + std::to_string(e.chunk_start) + "+" +
              std::to_string(e.chunk_length) + "]";
    trace.push_back({{"name", name},
                     {"cat", event_kind_name(kind)},
                     {"ph", "X"},
                     {"pid", e.stage},
                     {"tid", e.rank % stage_ranks},
                     {"ts", e.t_start_s * 1e6},
                     {"dur", (e.t_end_s - e.t_start_s) * 1e6},
                     {"args",
                      {{"micro_batch", e.micro_batch},
                       {"prompt", e.prompt},
                       {"chunk_start", e.chunk_start},
                       {"chunk_length", e.chunk_length}}}});
  }
  try {  // whole or not at all (a temporary renamed over the path)
    io::write_atomically(path, nlohmann::json{{"traceEvents", trace}, {"displayTimeUnit", "ms"}}.dump() + "\n");
  } catch (const std::runtime_error& e) {
    throw UserError(std::string("trace: ") + e.what());
  }
}

}  // namespace pf::trace
