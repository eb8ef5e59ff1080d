// Traffic report (see traffic.hpp).
#include "trace/traffic.hpp"

#include <algorithm>
#include <cstring>

#include "dist/root_decision.hpp"
#include "sched/hidden_slots.hpp"

namespace pf::trace {

TrafficReport traffic_formulas(const sched::BatchPlan& plan, int hidden_size, int bytes_per_element, int tp, int cp,
                               const std::vector<model::StageRange>& partition, bool reads_every_row,
                               bool latent_attention) {
  TrafficReport r;
  r.tp = tp;
  r.cp = cp;
  r.bytes_per_element = bytes_per_element;
  const double bsh = static_cast<double>(plan.total_tokens()) * hidden_size * bytes_per_element;
  const int pp = static_cast<int>(partition.size());
  r.boundary_formula_bytes.assign(std::max(0, pp - 1), bsh);
  r.boundary_bytes.assign(std::max(0, pp - 1), 0.0);
  double prompts_ended = 0;  // the rows a narrowed last layer finishes: each prompt's last
  for (const sched::MicroBatch& mb : plan.micro_batches) prompts_ended += mb.is_last ? 1 : 0;
  r.last_layer_narrowed = !reads_every_row && sched::last_layer_narrows(latent_attention, cp > 1) &&
                          !partition.empty() && prompts_ended > 0;
  const double last_row_bsh = prompts_ended * hidden_size * bytes_per_element;
  for (size_t s = 0; s < partition.size(); ++s) {
    const bool narrowed = r.last_layer_narrowed && s + 1 == partition.size();
    const double layer_tokens = narrowed ? (partition[s].count - 1) * bsh + last_row_bsh : partition[s].count * bsh;
    r.ring_formula_bytes.push_back(tp > 1 ? 2.0 * 2.0 * (tp - 1) / tp * layer_tokens / cp : 0.0);
  }
  r.allreduce_payload_bytes.assign(pp, 0.0);
  return r;
}

TrafficReport gather_traffic(const dist::Topology& topo, const sched::BatchPlan& plan, int hidden_size,
                             int wire_bytes_per_token_per_hidden, const std::vector<model::StageRange>& partition,
                             bool reads_every_row, bool latent_attention, const TrafficCounters& mine,
                             const CpTrafficShape& cp) {
  // Elements on the wire: the backend's bytes per token over the hidden size.
  const int bytes_per_element = std::max(1, wire_bytes_per_token_per_hidden / std::max(1, hidden_size));
  TrafficReport r = traffic_formulas(plan, hidden_size, bytes_per_element, topo.tp, topo.cp, partition, reads_every_row,
                                     latent_attention);
  const auto all = dist::gather_values_on_root(MPI_COMM_WORLD, std::vector<TrafficCounters>{mine});
  if (!all.here()) return r;
  const int stage_ranks = topo.cp * topo.tp;
  if (topo.cp > 1) {
    r.cp_bytes.assign(partition.size(), 0.0);
    r.cp_expected_bytes.assign(partition.size(), 0.0);
    r.cp_seed_formula_bytes.assign(partition.size(), 0.0);
    r.cp_pass_q_formula_bytes.assign(partition.size(), 0.0);
    for (size_t s = 0; s < partition.size(); ++s) {
      const int layers = partition[s].count;
      for (const sched::MicroBatch& mb : plan.micro_batches) {
        const double prefix = static_cast<double>(mb.start);
        const sched::CpWidths& w = cp.widths;
        const bool pass_q =
            sched::cp_attention_for_chunk(cp.mode, mb.start, mb.length, cp.ranks, w) == sched::CpAttention::kPassQ;
        r.cp_expected_bytes[s] += 4.0 * layers *
                                  (pass_q ? sched::cp_pass_q_floats(mb.length, cp.ranks, w)
                                          : sched::cp_pass_kv_floats(prefix, mb.length, cp.ranks, w));
        r.cp_seed_formula_bytes[s] += 4.0 * mb.length * w.shard * layers;
        r.cp_pass_q_formula_bytes[s] += 4.0 * mb.length * (w.query + w.heads * (w.head_out + 1.0)) * layers;
      }
    }
  }
  for (size_t rank = 0; rank < all->size(); ++rank) {
    const TrafficCounters& c = (*all)[rank].at(0);
    const int stage = static_cast<int>(rank) / stage_ranks;
    if (stage + 1 < topo.pp) r.boundary_bytes[stage] += c.p2p_bytes_sent;
    r.allreduce_payload_bytes[stage] += c.allreduce_payload_bytes / stage_ranks;
    if (topo.cp > 1) {
      r.cp_bytes[stage] += c.cp_bytes_sent / stage_ranks;
      r.cp_pass_kv_steps += c.cp_pass_kv_steps;  // every rank of a stage counts its layers:
      r.cp_pass_q_steps += c.cp_pass_q_steps;    // divided once summed
    }
  }
  r.cp_pass_kv_steps /= stage_ranks;
  r.cp_pass_q_steps /= stage_ranks;
  return r;
}

void print_traffic(const TrafficReport& r, std::FILE* out) {
  const double mib = 1024.0 * 1024.0;
  for (size_t s = 0; s < r.boundary_bytes.size(); ++s)
    std::fprintf(out,
                 "PP boundary %zu->%zu: %.1f MiB sent (%d TP rank(s) x the hidden states); formula B*S*H = %.1f MiB\n",
                 s, s + 1, r.boundary_bytes[s] / mib, r.tp, r.boundary_formula_bytes[s] / mib);
  for (size_t s = 0; s < r.cp_bytes.size(); ++s) {
    char sent[96];
    if (r.allreduce_modelled)
      std::snprintf(sent, sizeof sent, "ring modelled, not performed: the chunks' sizes give %.1f MiB a rank",
                    r.cp_expected_bytes[s] / mib);
    else
      std::snprintf(sent, sizeof sent, "%.1f MiB sent per rank (the chunks' sizes give %.1f MiB)", r.cp_bytes[s] / mib,
                    r.cp_expected_bytes[s] / mib);
    std::fprintf(out,
                 "CP group of stage %zu: %s; formulas: seeds' pass-KV 2*B*S*H_kv*L = %.1f MiB (one pass of the KV; "
                 "each chunk's ring carries its prefix again), pass-Q 2*B*S*H_q*L (+ log-sum-exps) = %.1f MiB\n",
                 s, sent, r.cp_seed_formula_bytes[s] / mib, r.cp_pass_q_formula_bytes[s] / mib);
  }
  if (r.cp > 1 && r.cp_pass_kv_steps + r.cp_pass_q_steps > 0)
    std::fprintf(out, "CP attention: pass-KV on %lld, pass-Q on %lld chunk-layer(s)\n", r.cp_pass_kv_steps,
                 r.cp_pass_q_steps);
  // The last stage's formula, where its last layer finished only each prompt's last row.
  const auto narrowed = [&](size_t s) {
    return r.last_layer_narrowed && s + 1 == r.ring_formula_bytes.size() ? " (its last layer: each prompt's last row)"
                                                                         : "";
  };
  if (r.tp > 1 && r.allreduce_modelled)
    for (size_t s = 0; s < r.ring_formula_bytes.size(); ++s)
      std::fprintf(out,
                   "TP group of stage %zu: all-reduces modelled, not performed; formula per rank 2 x layers x "
                   "2(N-1)/N x %s*H = %.1f MiB%s\n",
                   s, r.cp > 1 ? "(S/cp)" : "S", r.ring_formula_bytes[s] / mib, narrowed(s));
  else if (r.tp > 1)
    for (size_t s = 0; s < r.allreduce_payload_bytes.size(); ++s)
      std::fprintf(out,
                   "TP group of stage %zu: %.1f MiB all-reduced per rank; ring traffic per rank 2(N-1)/N x that = "
                   "%.1f MiB, formula 2 x layers x 2(N-1)/N x %s*H = %.1f MiB%s\n",
                   s, r.allreduce_payload_bytes[s] / mib, r.allreduce_payload_bytes[s] * 2.0 * (r.tp - 1) / r.tp / mib,
                   r.cp > 1 ? "(S/cp)" : "S", r.ring_formula_bytes[s] / mib, narrowed(s));
}

}  // namespace pf::trace
