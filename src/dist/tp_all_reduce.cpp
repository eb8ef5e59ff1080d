// The reducers' common bookkeeping (see tp_all_reduce.hpp).
#include "dist/tp_all_reduce.hpp"

#include <utility>

#include "dist/steady_clock.hpp"

namespace pf::dist {

void TpAllReduce::sum(float* data, int count) {
  payload_bytes_ += 4 * static_cast<int64_t>(count);
  if (!blocks_host_) return reduce(data, count);
  const double start = steady_seconds();
  reduce(data, count);
  spans_.push_back({start, steady_seconds()});
}

std::vector<HostSpan> TpAllReduce::take_spans() {
  return std::exchange(spans_, {});
}

}  // namespace pf::dist
