// Analytic and profiled stage costs.
#include "sim/stage_costs.hpp"

#include "dist/activation_wire.hpp"
#include "errors.hpp"
#include "sched/cp_ring_widths.hpp"

namespace pf::sim {

double CpStageCost::chunk_seconds(double prefix, double tokens) const {
  const double share = tokens / ring.ranks;
  return fixed_s + (matmul_per_token_s + tp_per_token_s) * share + expansion_per_token_s * (prefix + tokens) +
         layers * layer_step(prefix, tokens).seconds;
}

CpLayerStep CpStageCost::layer_step(double prefix, double tokens) const {
  const double attention_s = attention_k / layers * (2.0 * prefix * tokens + tokens * tokens + tokens);
  return cp_layer_step(ring, attention_s, prefix, tokens);
}

std::vector<StageCost> analytic_stage_costs(const model::ModelShape& shape, const HardwareSpec& hw,
                                            const std::vector<model::StageRange>& partition, int tp, bool fp8,
                                            int wire_bytes, const CpRequest& cp) {
  const double device_matmul_rate = (fp8 ? hw.peak_fp8_flops : hw.peak_bf16_flops) * hw.matmul_efficiency;
  const double matmul_rate = device_matmul_rate * tp;
  const double attention_rate = hw.peak_bf16_flops * hw.attention_efficiency * tp;
  const LinkSpec tp_ring = tp_link(hw, tp);
  std::vector<StageCost> costs;
  for (size_t s = 0; s < partition.size(); ++s) {
    StageCost cost;
    cost.chunk.form = sched::CostForm::kPrefixAware;
    CpStageCost& c = cost.cp;
    for (int layer = partition[s].first; layer < partition[s].first + partition[s].count; ++layer) {
      const double matmul = shape.rank_matmul_flops(layer, 1.0, tp) / device_matmul_rate;
      cost.chunk.b += matmul;
      c.matmul_per_token_s += matmul;
      // MLA expands the chunk's own latents (per token) and its prefix's (per prefix token).
      const double expansion = shape.latent_expansion_flops(0.0, 1.0) / matmul_rate;
      cost.chunk.b += expansion;
      cost.chunk.gamma += expansion;
      c.expansion_per_token_s += expansion;
      // attention_flops(L, x) = k (2Lx + x^2 + x) with k = num_heads (dqk + dv): quadratic + linear parts.
      const double k = shape.num_heads * shape.attention_width() / attention_rate;
      cost.chunk.a += k;
      cost.chunk.b += k;
      c.attention_k += k;
      if (tp > 1) {  // two ring all-reduces of x * H activations per layer
        const double ring = 2.0 * (tp - 1);
        cost.chunk.c += 2 * ring * tp_ring.latency_s;
        cost.chunk.b += 2 * ring / tp * shape.hidden_size * wire_bytes / tp_ring.bandwidth_Bps;
        c.fixed_s += 2 * ring * tp_ring.latency_s;
        c.tp_per_token_s += 2 * ring / tp * shape.hidden_size * wire_bytes / tp_ring.bandwidth_Bps;
      }
      // A GEMM of m rows at m / (m + half) of the rate costs `half` rows more than its
      // FLOPs: per chunk, the dense GEMMs' half rows, and each expert's (a chunk's rows
      // spread over experts / experts_per_token times as many GEMMs).
      double expert_per_token = 0;
      if (shape.moe_layer(layer))
        expert_per_token = 2.0 * 3.0 * shape.hidden_size * shape.moe_intermediate_size * shape.experts_per_token / tp;
      const double half_rows_s =
          hw.matmul_half_rows *
          ((shape.rank_matmul_flops(layer, 1.0, tp) - expert_per_token) +
           (shape.moe_layer(layer) ? expert_per_token * shape.experts / shape.experts_per_token : 0.0)) /
          device_matmul_rate;
      cost.chunk.c += half_rows_s;
      c.fixed_s += half_rows_s;
      ++c.layers;
    }
    if (cp.ranks > 1) {
      // The backend's ring (sched::cp_ring_widths, in floats): its cache rows (cuda's in
      // bf16), its queries and partial outputs at `wire_bytes` a value, a float log-sum-exp a head.
      const sched::CpWidths w = sched::cp_ring_widths(shape, tp, /*cuda=*/!hw.cpu);
      c.ring = {cp.ranks,
                cp.mode,
                cp_link(hw, tp, cp.ranks),
                4.0 * w.shard,
                static_cast<double>(wire_bytes) * w.query,
                w.heads * (static_cast<double>(wire_bytes) * w.head_out + 4.0)};
    }
    if (s + 1 == partition.size()) cost.lm_head_s = shape.lm_head_flops() / matmul_rate;
    costs.push_back(cost);
  }
  return costs;
}

std::vector<StageCost> profiled_stage_costs(const sched::CostProfile& profile, int pp) {
  std::vector<StageCost> costs(pp);
  std::vector<bool> seen(pp, false);
  for (const auto& fit : profile.stages) {
    if (fit.stage < 0 || fit.stage >= pp) continue;
    const sched::FitResult& chosen = fit.prefix.ok ? fit.prefix : fit.sglang;
    if (!chosen.ok)
      throw UserError("the cost profile has no usable fit for stage " + std::to_string(fit.stage) + " (" +
                      fit.prefix.problem + ")");
    costs[fit.stage].chunk = chosen.model;
    seen[fit.stage] = true;
  }
  for (int s = 0; s < pp; ++s)
    if (!seen[s])
      throw UserError("the cost profile has no stage " + std::to_string(s) + " (profile with --pp " +
                      std::to_string(pp) + ")");
  return costs;
}

LinkSpec stage_link(const HardwareSpec& hw, int stage, int tp, int cp) {
  const int width = tp * cp;
  const int node_a = stage * width / hw.devices_per_node, node_b = (stage + 1) * width / hw.devices_per_node;
  return node_a == node_b ? hw.intra_node : hw.inter_node;
}

LinkSpec cp_link(const HardwareSpec& hw, int tp, int cp) {
  return tp * cp <= hw.devices_per_node ? hw.intra_node : hw.inter_node;
}

LinkSpec tp_link(const HardwareSpec& hw, int tp) {
  return tp <= hw.devices_per_node ? hw.intra_node : hw.inter_node;
}

}  // namespace pf::sim
