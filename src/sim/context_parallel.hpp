// Context parallelism (the third cut: CP slices the sequence) in the simulator's cost model:
// each of a stage's `ranks` CP ranks computes 1/ranks of a chunk's tokens (zigzag-balanced
// under the causal mask) and attends them to every earlier key by a ring, one of
//   pass-KV: the KV shards go around the ring (each rank holds (L + x) / ranks tokens' KV);
//   pass-Q:  the chunk's queries go around, partial outputs and their log-sum-exp come back
//            (all-to-all), which moves far less when the cached prefix L is much longer than x;
// each ring step's transfer overlapped with attention on the block already there:
//   t = a + (ranks - 1) * max(a, step)     a = one rank's attention / ranks (one block)
// (Meta, "Context Parallelism for Scalable Million-Token Inference", 2024). `auto` takes
// the one that moves fewer bytes, as `run` does (sched::cp_attention_for_chunk; close to
// Meta's rule, pass-Q when x / (x + L) <= 2 N_kv / N_h). Token shares are real-valued here
// (x / ranks).
#pragma once

#include <string>

#include "sched/context_split.hpp"
#include "sim/hardware.hpp"

namespace pf::sim {

// The variants and Meta's rule are the run's too (sched/context_split.hpp).
using sched::cp_attention_name;
using sched::CpAttention;
using sched::meta_rule_prefers_pass_q;
using sched::parse_cp_attention;

// What a CP ring moves per token and layer, for one TP rank (as the backend's ring:
// analytic_stage_costs): K and V of its KV heads (cuda: bf16; MLA: the latent row, whole on
// every TP rank); its query heads' Q; their partial outputs and one float log-sum-exp each.
struct CpRing {
  int ranks = 1;
  CpAttention mode = CpAttention::kAuto;
  LinkSpec link;
  double kv_bytes_per_token = 0, q_bytes_per_token = 0, out_bytes_per_token = 0;
};

// One layer's ring attention for a chunk of x tokens after L: the time (attention compute
// of the whole chunk on one TP group, unsplit, is `attention_s`), which variant, and the
// bytes one rank sends.
struct CpLayerStep {
  double seconds = 0;
  CpAttention variant = CpAttention::kPassKv;
  double bytes_sent = 0;
};
CpLayerStep cp_layer_step(const CpRing& ring, double attention_s, double prefix, double tokens);

}  // namespace pf::sim
