// FLOP counts of prefill, for achieved-rate figures (summary, benchmarks). Multiply-adds
// count 2. Linear: q/k/v, o, gate/up, down. Attention: QK^T and PV over the keys each
// query sees (causal). Norms, RoPE and activations are left out (they are O(tokens x H)).
#pragma once

#include <cstdint>

#include "model/config.hpp"
#include "sched/batch_plan.hpp"

namespace pf::compute {

// One layer on a chunk of `tokens` after `pos0` tokens, for a shard with the given local
// head counts and MLP width (the whole model: num_heads, num_kv_heads, intermediate_size).
double layer_chunk_flops(const model::ModelConfig& config, int heads, int kv_heads, int intermediate, int tokens,
                         int64_t pos0);

// Every layer on every chunk of the plan, plus the LM head on each prompt's last position.
double plan_flops(const model::ModelConfig& config, const sched::BatchPlan& plan);

}  // namespace pf::compute
