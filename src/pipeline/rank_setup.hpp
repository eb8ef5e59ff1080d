// What every rank sets up before it computes, shared by `run` and `profile`: the model and
// its placement on this rank (stage layers, TP shard), the weights, the KV pool's shape.
// Each step that can fail on bad input is collective (dist/checked_step.hpp).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "compute/decoder_layer.hpp"
#include "dist/topology.hpp"
#include "io/prompts_h5.hpp"
#include "kvcache/paged_kv_pool.hpp"
#include "model/layer_partition.hpp"
#include "model/model_shape.hpp"
#include "model/model_source.hpp"
#include "model/weights.hpp"

namespace pf::pipeline {

struct RankModel {
  model::ModelShape shape;     // every backend: sizes and FLOP counts
  nlohmann::json config_json;  // config.json as read (output attributes, profile identity)
  std::vector<model::StageRange> partition;
  bool partition_given = false;  // --layer-partition: kept whatever the prompts
  model::ShardSpec shard;        // this rank's TP shard (heads, MLP width, vocabulary slice)
  // Backends that compute for real: the strict config (Llama / Qwen2 / Qwen3) and the weights.
  std::optional<model::ModelSource> source;
  // Backends with weights, once they are loaded: the weights' identity (every value every
  // rank loaded, agree_on_weights_identity), what --resume, --save-kv and --kv-store compare.
  std::string weights_fingerprint;

  // The strict config of a backend that computes; std::logic_error (a bug, not a user error)
  // when the model was opened without weights (emulate), which has none.
  const model::ModelConfig& config() const;
  // element_bytes: 4 (float) or 2 (bf16: the cpu's --dtype bf16).
  kv::KvShape kv_shape(int stage, int page_size, int element_bytes = 4) const {
    return compute::cache_shape(config(), shard, partition[stage].count, page_size, element_bytes);
  }
};

// Collective. Opens config.json (or the preset), partitions the layers (`partition_text`, or
// SGLang's default until settle_partition), and checks that every rank sees rank 0's config.
// With `with_weights` (real compute): the strict config, TP divisibility, and rank 0 checks
// every tensor's shape. Without (emulate): any config.json the cost model can count (dense,
// MoE, MLA).
RankModel open_rank_model(const dist::Topology& topology, const std::string& model_flag, uint64_t seed,
                          const std::string& partition_text, model::ExpertSplit expert_split, bool with_weights = true);

// The layer partition of a run, before any weights are read: --layer-partition when given;
// else a saved cost profile's own (`profiled`, non-empty: its costs were timed on those
// layers); else, when the last stage runs the LM head on `scored[i]` positions of each prompt
// i (--logprobs, --top-k, --token-ids), that stage lightened by what the head is worth over
// these prompts (model::lm_head_in_layers, model::balanced_partition); else SGLang's default.
// Collective, before any weights are read: every rank places its layers as rank 0 chose
// (`on_root`, read there only), then checks that the tensors it will load are rank 0's
// (headers and sampled bytes: a node with a stale copy is refused).
void settle_partition(const dist::Topology& topology, RankModel& rank_model,
                      const std::vector<model::StageRange>& on_root);

std::vector<model::StageRange> run_partition(const RankModel& rank_model, int pp, const std::vector<int64_t>& lengths,
                                             const std::vector<int64_t>& scored, const std::string& profiled);

// Collective. This rank's layers and TP shard only, with the digests of what it read.
model::StageWeights load_rank_weights(const dist::Topology& topology, const RankModel& rank_model,
                                      const model::LayerSink& take_layer = {});

// Collective, after every rank loaded its weights: the weights' identity from every rank's
// digests (model/weights_digest.hpp), the same whatever the layout; on every rank (over
// MPI_COMM_WORLD: rank 0 combines them).
std::string agree_on_weights_identity(const RankModel& rank_model, const std::vector<model::BlockDigest>& loaded);

// Collective. Rank 0 has read `prompts`; afterwards every rank knows the prompt lengths
// (returned) and where each prompt's scores start (/score_start, when the input has it);
// stage 0's ranks, which embed, also hold the token ids, as do the last
// stage's when `last_stage_scores` (--logprobs: it scores each next token).
std::vector<int64_t> share_prompts(const dist::Topology& topology, io::PromptSet& prompts, bool last_stage_scores);

// The part of a placement identity (what a cost profile must match to be reused) that the
// topology and the opened model settle: config.json, pp, tp, the layer partition used. The
// options that belong to it (the backend) are added by cli::placement_identity.
nlohmann::json placed_model_identity(const dist::Topology& topology, const RankModel& rank_model);

}  // namespace pf::pipeline
