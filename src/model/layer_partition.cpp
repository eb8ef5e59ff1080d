// Layer partition: default SGLang split or an explicit list.
#include "model/layer_partition.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>

#include "errors.hpp"
#include "model/model_shape.hpp"

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

std::vector<StageRange> balanced_partition(int num_layers, int num_stages, double last_stage_extra) {
  std::vector<StageRange> even = default_partition(num_layers, num_stages);
  if (!(last_stage_extra > 0) || num_stages < 2) return even;
  // The last stage's layers that make the busiest stage least busy: its layers plus the
  // extra, against the most any other stage gets of the rest (shared as SGLang shares them).
  // Ties keep more layers on the last stage, nearer the default.
  const int most = num_layers - (num_stages - 1);  // one layer at least for every other stage
  int last = 1;
  double best = std::numeric_limits<double>::infinity();
  for (int count = 1; count <= most; ++count) {
    const int others = (num_layers - count + num_stages - 2) / (num_stages - 1);
    const double busiest = std::max(static_cast<double>(others), count + last_stage_extra);
    if (busiest <= best) {
      best = busiest;
      last = count;
    }
  }
  std::vector<StageRange> rest = default_partition(num_layers - last, num_stages - 1);
  rest.push_back({num_layers - last, last});
  return rest;
}

double lm_head_in_layers(const ModelShape& shape, const std::vector<int64_t>& lengths,
                         const std::vector<int64_t>& scored) {
  double layers = 0;  // every layer on every prompt (chunking moves it little: MLA's re-expansion only)
  double head = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int tokens = static_cast<int>(std::min<int64_t>(lengths[i], std::numeric_limits<int>::max()));
    layers += chunk_flops(shape, 0, shape.num_layers, tokens, 0);
    head += shape.lm_head_flops() * static_cast<double>(i < scored.size() ? scored[i] : 0);
  }
  const double layer = layers / std::max(shape.num_layers, 1);
  return layer > 0 ? head / layer : 0.0;
}

std::vector<StageRange> run_default_partition(const ModelShape& shape, int num_stages,
                                              const std::vector<int64_t>& lengths, const std::vector<int64_t>& scored) {
  return balanced_partition(shape.num_layers, num_stages, lm_head_in_layers(shape, lengths, scored));
}

std::vector<StageRange> suggested_partition(const std::vector<StageRange>& used, const std::vector<double>& busy_s) {
  const int stages = static_cast<int>(used.size());
  if (stages < 2 || static_cast<int>(busy_s.size()) != stages) return {};
  // A layer's time at the pace of the stages before the last (which do only layers).
  double seconds = 0;
  int layers = 0;
  for (int s = 0; s + 1 < stages; ++s) {
    seconds += busy_s[s];
    layers += used[s].count;
  }
  if (!(seconds > 0) || layers == 0) return {};
  const double per_layer = seconds / layers;
  const double extra = std::max(0.0, busy_s.back() / per_layer - used.back().count);
  const int total =
      std::accumulate(used.begin(), used.end(), 0, [](int n, const StageRange& r) { return n + r.count; });
  return balanced_partition(total, stages, extra);
}

std::vector<StageRange> parse_partition(const std::string& text, int num_layers, int num_stages) {
  std::vector<int> counts;
  std::stringstream stream(text);
  std::string item;
  // Digits only, one count between each pair of commas: "2,2," or " 2,2" is a typo, not a split.
  const bool digits_and_commas = !text.empty() && text.find_first_not_of("0123456789,") == std::string::npos &&
                                 text.front() != ',' && text.back() != ',' && text.find(",,") == std::string::npos;
  while (digits_and_commas && std::getline(stream, item, ',')) {
    if (item.size() > 9 || std::stoi(item) <= 0) break;  // (more than 999,999,999 layers is no model)
    counts.push_back(std::stoi(item));
  }
  if (!digits_and_commas || counts.size() != static_cast<size_t>(std::count(text.begin(), text.end(), ',') + 1))
    throw UserError("--layer-partition \"" + text.substr(0, 80) + (text.size() > 80 ? "..." : "") +
                    "\": give one positive layer count a stage, separated by commas (15,15,15,16)");
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
