// The CP ring's cost (see context_parallel.hpp).
#include "sim/context_parallel.hpp"

#include <algorithm>
#include <cmath>

#include "errors.hpp"

namespace pf::sim {

CpLayerStep cp_layer_step(const CpRing& ring, double attention_s, double prefix, double tokens) {
  const double n = ring.ranks;
  if (ring.ranks <= 1) return {attention_s, CpAttention::kPassKv, 0.0};
  const double block = attention_s / (n * n);  // one rank's share, one ring step's block
  // pass-KV: every rank's KV shard (prefix and chunk) visits every other rank.
  const double kv_step = (prefix + tokens) / n * ring.kv_bytes_per_token;
  const CpLayerStep pass_kv{block + (n - 1) * std::max(block, ring.link.transfer_s(kv_step)), CpAttention::kPassKv,
                            (n - 1) * kv_step};
  // pass-Q: the chunk's query shards visit, then each rank's partial outputs go home.
  const double q_step = tokens / n * ring.q_bytes_per_token, out_step = tokens / n * ring.out_bytes_per_token;
  const CpLayerStep pass_q{
      block + (n - 1) * std::max(block, ring.link.transfer_s(q_step)) + (n - 1) * ring.link.transfer_s(out_step),
      CpAttention::kPassQ, (n - 1) * (q_step + out_step)};
  switch (ring.mode) {
    case CpAttention::kPassKv:
      return pass_kv;
    case CpAttention::kPassQ:
      return pass_q;
    case CpAttention::kAuto:
      break;
  }
  // What `run` does with auto (sched::cp_attention_for_chunk): the one that moves fewer bytes
  // (pass-Q deep in a prompt), modelled as run will take it, not the faster as modelled.
  return pass_q.bytes_sent < pass_kv.bytes_sent ? pass_q : pass_kv;
}

}  // namespace pf::sim
