// A hardware description from a profile (see profile_calibration.hpp).
#include "sim/profile_calibration.hpp"

#include <cmath>

#include "errors.hpp"
#include "model/layer_partition.hpp"

namespace pf::sim {

int profiled_count(const sched::CostProfile& profile, const char* key, const std::string& path) {
  const auto found = profile.identity.find(key);
  if (found == profile.identity.end()) return 1;
  if (!found->is_number_integer()) throw UserError(path + ": its identity's " + key + " is not a whole number");
  return found->get<int>();
}

void require_profiled_machine(const sched::CostProfile& profile, const HardwareSpec& hw, const std::string& path) {
  const nlohmann::json& id = profile.identity;
  if (id.contains("backend") && !id["backend"].is_string())
    throw UserError(path + ": its identity's backend is not text");
  const std::string backend = id.value("backend", std::string("cpu"));
  if ((backend == "cpu") != hw.cpu)
    throw UserError(path + " was profiled on the " + backend + " backend, and " + hw.path + " describes " +
                    (hw.cpu ? "cpu ranks" : "GPUs") + ": give the hardware file of the machine it measured");
}

HardwareSpec hardware_from_profile(const HardwareSpec& base, const model::ModelShape& shape,
                                   const sched::CostProfile& profile, const std::string& path) {
  const nlohmann::json& id = profile.identity;
  const int pp = profiled_count(profile, "pp", path), tp = profiled_count(profile, "tp", path),
            cp = profiled_count(profile, "cp", path);
  if (id.contains("layer_partition") && !id["layer_partition"].is_string())
    throw UserError(path + ": its identity's layer_partition is not text");
  if (tp != 1 || cp != 1)
    throw UserError(path + " was profiled at tp " + std::to_string(tp) + ", cp " + std::to_string(cp) +
                    ": a profile that calibrates the model must be of one rank a stage (pipefill profile --tp 1)");
  require_profiled_machine(profile, base, path);
  const std::vector<model::StageRange> partition = sched::profiled_partition(profile, shape.num_layers, pp, path);
  // Pooled over stages: seconds of each term against the FLOPs (or rows) they pay for.
  double attention_coefficient = 0, attention_s = 0, matmul_flops = 0, matmul_s = 0, tile_flops = 0, fixed_s = 0;
  for (const sched::StageCostFit& fit : profile.stages) {
    const sched::FitResult& chosen = fit.prefix.ok ? fit.prefix : fit.sglang;
    if (!chosen.ok || fit.stage < 0 || fit.stage >= pp)
      throw UserError(path + ": stage " + std::to_string(fit.stage) + " has no usable fit (" + fit.prefix.problem +
                      ")");
    const model::StageRange& range = partition[fit.stage];
    for (int layer = range.first; layer < range.first + range.count; ++layer) {
      attention_coefficient += shape.num_heads * shape.attention_width();
      const double per_token = shape.matmul_flops(layer, 1.0) + shape.latent_expansion_flops(0.0, 1.0);
      matmul_flops += per_token;
      double expert = 0;
      if (shape.moe_layer(layer))
        expert = 2.0 * 3.0 * shape.hidden_size * shape.moe_intermediate_size * shape.experts_per_token;
      const double experts_per_token_share =
          shape.moe_layer(layer) ? static_cast<double>(shape.experts) / shape.experts_per_token : 0.0;
      tile_flops += shape.matmul_flops(layer, 1.0) - expert + expert * experts_per_token_share;
    }
    attention_s += chosen.model.a;
    matmul_s += chosen.model.b - chosen.model.a;
    fixed_s += chosen.model.c;
  }
  if (!(attention_s > 0) || !(matmul_s > 0))
    throw UserError(path +
                    ": its fits give no positive attention and matmul times (b must exceed a): profile longer "
                    "chunks (--chunk-size) on an idle machine");
  HardwareSpec hw = base;
  hw.path = base.path + " with rates from " + path;
  hw.attention_efficiency = attention_coefficient / (attention_s * hw.peak_bf16_flops);
  hw.matmul_efficiency = matmul_flops / (matmul_s * hw.peak_bf16_flops);
  hw.peak_fp8_flops = hw.peak_bf16_flops;  // the profile measured the backend's own arithmetic
  const double matmul_rate = hw.peak_bf16_flops * hw.matmul_efficiency;
  hw.matmul_half_rows = fixed_s * matmul_rate / tile_flops;
  // A millionth of the peak is no machine either: a hand-edited or broken fit (every time in the
  // ranking would be astronomical, or NaN).
  if (!(hw.matmul_efficiency >= 1e-6 && hw.attention_efficiency >= 1e-6 && std::isfinite(hw.matmul_half_rows)))
    throw UserError(path + " implies matmuls at " + std::to_string(hw.matmul_efficiency) + " and attention at " +
                    std::to_string(hw.attention_efficiency) + " of " + base.path +
                    "'s peak, less than a millionth: its fits are not a machine's (profile again)");
  if (hw.matmul_efficiency > 1 || hw.attention_efficiency > 1)
    throw UserError(path + " implies matmuls at " + std::to_string(hw.matmul_efficiency) + " and attention at " +
                    std::to_string(hw.attention_efficiency) + " of " + base.path +
                    "'s peak, more than the peak: the profile or the file is not of this machine" +
                    (base.cpu ? std::string(" (the file's peak is one core's: profile one thread a rank, "
                                            "`pipefill profile --threads 1`)")
                              : std::string()));
  return hw;
}

}  // namespace pf::sim
