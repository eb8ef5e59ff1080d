// Which decoder layers each pipeline stage owns.
#pragma once

#include <string>
#include <vector>

namespace pf::model {

struct StageRange {
  int first = 0;  // first global layer index
  int count = 0;
};

// SGLang's default: equal shares, the remainder one extra layer each on the *last* stages
// (the last stage finishes a prompt last, so the early stages are the ones that idle less).
std::vector<StageRange> default_partition(int num_layers, int num_stages);

// "15,15,15,16": one positive count per stage summing to num_layers, else UserError.
std::vector<StageRange> parse_partition(const std::string& text, int num_layers, int num_stages);

std::string partition_text(const std::vector<StageRange>& partition);  // "4,4"

}  // namespace pf::model
