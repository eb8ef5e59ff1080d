// `pipefill plan`: the chunk sizes a policy gives, one per line (or JSON), for tuning and tests.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "sched/batch_plan.hpp"

namespace pf::cli {

int plan_command(int argc, char** argv) {
  PlanOptions options;
  if (!parse_plan(argc, argv, options)) return 0;
  const sched::FixedChunkPolicy policy(options.chunk_size);
  nlohmann::json json = nlohmann::json::array();
  for (size_t p = 0; p < options.lengths.size(); ++p) {
    const int64_t length = options.lengths[p];
    const auto sizes = sched::chunk_sizes(length, policy);
    if (options.json) {
      json.push_back({{"length", length}, {"chunks", sizes}});
    } else {
      if (p > 0) std::printf("\n");  // a blank line between prompts
      for (int size : sizes) std::printf("%d\n", size);
    }
  }
  if (options.json) std::printf("%s\n", json.dump().c_str());
  return 0;
}

}  // namespace pf::cli
