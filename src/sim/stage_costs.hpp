// Per-stage cost of a chunk, the common currency of the emulate backend and the simulator:
// a prefix-form chunk model t(L, x) (sched/cost_model.hpp) plus the LM head's time on a
// prompt's last chunk. From an analytic count (model shape x hardware) or from a profile.
#pragma once

#include <vector>

#include "dist/activation_wire.hpp"
#include "model/layer_partition.hpp"
#include "model/model_shape.hpp"
#include "sched/cost_model.hpp"
#include "sched/cost_profile.hpp"
#include "sim/context_parallel.hpp"
#include "sim/hardware.hpp"

namespace pf::sim {

// A stage's layers split over CP ranks (ring.ranks > 1): what chunk_seconds then computes
// instead of the quadratic model, per rank, every rank in step (context_parallel.hpp).
struct CpStageCost {
  CpRing ring;
  int layers = 0;
  double matmul_per_token_s = 0;     // projections and MLP, one TP group, per token of the rank's share
  double expansion_per_token_s = 0;  // MLA: expanding each latent the rank attends to (all L + x of them)
  double attention_k = 0;            // the chunk's attention on one TP group: attention_k * (2Lx + x^2 + x)
  double fixed_s = 0;                // per chunk: TP all-reduce latencies
  double tp_per_token_s = 0;         // TP all-reduce bandwidth, per token of the rank's share
  double chunk_seconds(double prefix, double tokens) const;
  // One layer's ring step for this chunk (the variant auto picks, the bytes a rank sends).
  CpLayerStep layer_step(double prefix, double tokens) const;
};

struct StageCost {
  sched::ChunkCostModel chunk;
  double lm_head_s = 0;  // last stage only: one row's (a profile's: 0, its chunks carry what it measured)
  CpStageCost cp;        // used when cp.ring.ranks > 1
  double chunk_seconds(double prefix, double tokens) const {
    return cp.ring.ranks > 1 ? cp.chunk_seconds(prefix, tokens) : chunk.chunk_time(prefix, tokens);
  }
};

// How a stage's layers are split over CP ranks (ranks 1: not at all).
struct CpRequest {
  int ranks = 1;
  CpAttention mode = CpAttention::kAuto;
};

// Matmuls at the fp8 rate when `fp8` (an FP8 checkpoint), attention at the bf16 rate; TP
// all-reduces (two per layer, ring) at tp_link's bus bandwidth, `wire_bytes` per activation (pipefill sends float32; 2
// models a bf16 sender). With CP the ring runs on the link between CP ranks (cp_link).
std::vector<StageCost> analytic_stage_costs(const model::ModelShape& shape, const HardwareSpec& hw,
                                            const std::vector<model::StageRange>& partition, int tp, bool fp8,
                                            int wire_bytes = dist::kActivationWireBytes, const CpRequest& cp = {});

// Stage costs from a saved profile, in the chosen form (prefix-aware if every stage has it).
std::vector<StageCost> profiled_stage_costs(const sched::CostProfile& profile, int pp);

// The link between stage s and s + 1: across nodes when they sit on different nodes
// (block placement, TP innermost, then CP: stage s occupies devices [s cp tp, (s+1) cp tp)).
LinkSpec stage_link(const HardwareSpec& hw, int stage, int tp, int cp = 1);
// The CP ring's link: within a node when the stage's cp x tp devices fit one, else across.
LinkSpec cp_link(const HardwareSpec& hw, int tp, int cp);
// A TP group's all-reduce ring: NVLink's within a node; across nodes one GPU's inter-node
// link (one NIC's rate). NCCL on a fabric with a NIC a GPU can run a ring a NIC, up to
// gpus_per_node x that; the seeds' TP32 runs (30.5 % behind PP4 x TP8 on the same 32 H20)
// need about 1.4 NICs' worth, and one NIC keeps that ranking (docs/performance.md).
LinkSpec tp_link(const HardwareSpec& hw, int tp);

}  // namespace pf::sim
