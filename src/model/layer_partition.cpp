// Layer partition: default SGLang split or an explicit list.
#include "model/layer_partition.hpp"

#include <sstream>

#include "errors.hpp"

namespace pf::model {
namespace {

std::vector<StageRange> from_counts(const std::vector<int>& counts) {
  std::vector<StageRange> ranges;
  int first = 0;
  for (int count : counts) {
    ranges.push_back({first, count});
    first += count;
  }
  return ranges;
}

}  // namespace

std::vector<StageRange> default_partition(int num_layers, int num_stages) {
  if (num_stages > num_layers)
    throw UserError("--pp " + std::to_string(num_stages) + " is more stages than the model's " +
                    std::to_string(num_layers) + " layers");
  std::vector<int> counts(num_stages, num_layers / num_stages);
  const int extra = num_layers % num_stages;
  for (int s = num_stages - extra; s < num_stages; ++s) ++counts[s];
  return from_counts(counts);
}

std::vector<StageRange> parse_partition(const std::string& text, int num_layers, int num_stages) {
  std::vector<int> counts;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    size_t used = 0;
    int value = 0;
    try {
      value = std::stoi(item, &used);
    } catch (...) {
      used = 0;
    }
    if (used == 0 || used != item.size() || value <= 0)
      throw UserError("--layer-partition \"" + text + "\": each entry must be a positive layer count");
    counts.push_back(value);
  }
  if (static_cast<int>(counts.size()) != num_stages)
    throw UserError("--layer-partition has " + std::to_string(counts.size()) + " entries but --pp is " +
                    std::to_string(num_stages));
  int sum = 0;
  for (int c : counts) sum += c;
  if (sum != num_layers)
    throw UserError("--layer-partition sums to " + std::to_string(sum) + " layers but the model has " +
                    std::to_string(num_layers));
  return from_counts(counts);
}

std::string partition_text(const std::vector<StageRange>& partition) {
  std::string text;
  for (size_t i = 0; i < partition.size(); ++i) text += (i ? "," : "") + std::to_string(partition[i].count);
  return text;
}

}  // namespace pf::model
