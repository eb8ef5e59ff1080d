// Communication volume of a run beside the seed's formulas: hidden states over each stage
// boundary (PP: B S H per boundary, B S H (P-1) in all) and the TP all-reduce per stage
// (ring all-reduce: 2 (N-1)/N of the payload per rank, two per layer).
#pragma once

#include <cstdio>
#include <vector>

#include "dist/topology.hpp"
#include "model/layer_partition.hpp"
#include "sched/batch_plan.hpp"
#include "sched/context_split.hpp"

namespace pf::trace {

// Bytes one rank moved (counted by the stage loop): hidden states sent to the next stage,
// and payload handed to the TP all-reduce.
struct TrafficCounters {
  double p2p_bytes_sent = 0;
  double allreduce_payload_bytes = 0;
  double cp_bytes_sent = 0;  // --cp: the ring's K/V, queries and partial outputs this rank sent
  long long cp_pass_kv_steps = 0, cp_pass_q_steps = 0;  // chunk-layers attended by each variant
};

// What the CP ring of a TP rank moves per token (--cp), and the rule chunks chose by.
struct CpTrafficShape {
  int ranks = 1;
  sched::CpWidths widths;
  sched::CpAttention mode = sched::CpAttention::kAuto;
};

struct TrafficReport {
  int tp = 1;
  int bytes_per_element = 4;
  bool allreduce_modelled = false;              // emulate / simulate: TP and CP exchanges inside the cost
                                                // model, not performed
  std::vector<double> boundary_bytes;           // measured: all TP ranks of stage s -> s + 1
  std::vector<double> boundary_formula_bytes;   // B S H x bytes per element (one copy of the hidden states)
  std::vector<double> allreduce_payload_bytes;  // measured per rank of each stage (mean over its TP ranks)
  std::vector<double> ring_formula_bytes;       // per rank: 2 layers x 2 (N-1)/N x (S / cp) H x bytes (a CP
                                                // rank's TP group all-reduces its own share of the tokens)
  bool last_layer_narrowed = false;             // the last stage's last layer: each prompt's last row only
  // --cp, per stage: bytes a CP rank sent (mean over the stage's ranks), what the chunks'
  // sizes give for the variants they took, the seeds' pass-KV formula 2 B S H_kv L (one pass
  // of the prompts' K and V: the ring's floor, which a chunked prompt exceeds, since each
  // chunk's ring carries the prefix before it again) and pass-Q's own, 2 B S H_q L (the
  // queries out, the partial outputs back; plus one log-sum-exp a head); chunk-layers by
  // variant.
  int cp = 1;
  std::vector<double> cp_bytes, cp_expected_bytes, cp_seed_formula_bytes, cp_pass_q_formula_bytes;
  long long cp_pass_kv_steps = 0, cp_pass_q_steps = 0;
};

// The formulas alone (the simulator's report): tokens S = the plan's total, per stage.
// `reads_every_row`: whether the last stage reads every row (sched::last_stage_reads_every_row);
// when it does not, and its last layer narrows (sched::last_layer_narrows), that layer
// finishes (and all-reduces) only each prompt's last row.
TrafficReport traffic_formulas(const sched::BatchPlan& plan, int hidden_size, int bytes_per_element, int tp, int cp,
                               const std::vector<model::StageRange>& partition, bool reads_every_row,
                               bool latent_attention);

// Collective: every rank's counters to rank 0, beside the formulas (valid on rank 0).
TrafficReport gather_traffic(const dist::Topology& topology, const sched::BatchPlan& plan, int hidden_size,
                             int wire_bytes_per_token_per_hidden, const std::vector<model::StageRange>& partition,
                             bool reads_every_row, bool latent_attention, const TrafficCounters& mine,
                             const CpTrafficShape& cp = {});

void print_traffic(const TrafficReport& report, std::FILE* out);

}  // namespace pf::trace
