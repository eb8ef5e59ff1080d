// Host TP all-reduce (see host_all_reduce.hpp).
#include "dist/host_all_reduce.hpp"

#include "dist/collectives.hpp"

namespace pf::dist {

void HostAllReduce::reduce(float* data, int count) {
  allreduce_sum(data, count, tp_comm_);
}

}  // namespace pf::dist
