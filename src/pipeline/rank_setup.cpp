// Rank set-up steps (see rank_setup.hpp).
#include "pipeline/rank_setup.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "dist/checked_step.hpp"
#include "dist/collectives.hpp"
#include "dist/root_decision.hpp"
#include "dist/same_everywhere.hpp"
#include "errors.hpp"
#include "io/file_checks.hpp"
#include "io/fnv1a.hpp"
#include "model/presets.hpp"

namespace pf::pipeline {
namespace {

// The layer a tensor belongs to ("model.layers.12.mlp..." -> 12), or -1 for the others
// (embedding, final norm, LM head).
int layer_of(const std::string& name) {
  int layer = -1;
  return std::sscanf(name.c_str(), "model.layers.%d.", &layer) == 1 ? layer : -1;
}

// Every rank checks, for the tensors it will load, that its checkpoint files hold what rank
// 0's do (header and sampled bytes, io::SafetensorsFile::content_fingerprint): a node with a
// stale copy is refused before anything is loaded. This is not the weights' identity (that
// is every value each rank loads, agree_on_weights_identity); it is the cheap early check.
void require_rank0_checkpoint(const dist::Topology& topo, const RankModel& m) {
  std::string table;
  dist::checked_step(MPI_COMM_WORLD, [&] {
    if (!topo.is_writer()) return;
    for (const auto& spec : model::expected_tensors(m.config()))
      table += spec.name + " " + io::Fnv1a().add_value(m.source->tensors->fingerprint(spec.name)).hex() + "\n";
  });
  const model::StageRange layers = m.partition[topo.stage];
  dist::require_table_entries_as_rank0(
      table, "weights",
      [&](const std::string& name) {
        const int layer = layer_of(name);
        return layer < 0 || (layer >= layers.first && layer < layers.first + layers.count);
      },
      [&](const std::string& name) {
        return m.source->tensors->has(name) ? io::Fnv1a().add_value(m.source->tensors->fingerprint(name)).hex()
                                            : std::string("missing");
      },
      MPI_COMM_WORLD);
}

}  // namespace

const model::ModelConfig& RankModel::config() const {
  if (!source)
    throw std::logic_error(
        "RankModel::config(): the model was opened without weights (emulate backend), so it has "
        "no strict config; use RankModel::shape");
  return source->config;
}

RankModel open_rank_model(const dist::Topology& topo, const std::string& model_flag, uint64_t seed,
                          const std::string& partition_text, model::ExpertSplit expert_split, bool with_weights) {
  RankModel m;
  dist::checked_step(MPI_COMM_WORLD, [&] {
    if (with_weights) {
      m.source = model::open_model(model_flag, seed);
      m.config_json = model::to_json(m.config());
    } else if (model_flag.rfind("synthetic:", 0) == 0) {
      m.config_json = model::to_json(model::preset_config(model_flag.substr(10)));
    } else {  // a model directory, or (the emulator needs nothing else) a config.json itself
      const std::string path = model::config_json_path(model_flag);
      io::require_regular_file(path, "model config");
      m.config_json = model::read_config_json(path);
    }
    m.shape = model::shape_from_json(m.config_json, model_flag);
    // The layout first (the emulator's too: it models only layouts that run), then the tensors.
    model::validate_tensor_parallel(m.shape, topo.tp, expert_split);
    if (m.source && topo.is_writer() && !m.source->synthetic) {
      const std::string unread = model::validate_tensors(m.config(), *m.source->tensors, model_flag);
      if (!unread.empty()) std::fprintf(stderr, "warning: %s\n", unread.c_str());
    }
    const int layers = m.shape.num_layers;
    m.partition_given = !partition_text.empty();
    m.partition = m.partition_given ? model::parse_partition(partition_text, layers, topo.pp)
                                    : model::default_partition(layers, topo.pp);
  });
  // Every rank must hold the same model as rank 0 before anything sizes itself from it.
  dist::require_same_as_rank0(m.config_json.dump(), "model config (" + model_flag + ")", MPI_COMM_WORLD);
  if (m.source) {
    m.shard = model::make_shard_spec(m.config(), topo.tp, topo.tp_rank, expert_split);
  } else {
    const model::VocabSlice vocab = model::vocab_slice(m.shape.vocab_size, topo.tp, topo.tp_rank);
    m.shard.tp = topo.tp;
    m.shard.tp_rank = topo.tp_rank;
    m.shard.vocab_begin = vocab.begin;
    m.shard.vocab_count = vocab.count;
  }
  return m;
}

void settle_partition(const dist::Topology& topo, RankModel& m, const std::vector<model::StageRange>& on_root) {
  const std::string text = dist::decide_on_root(MPI_COMM_WORLD, [&] { return model::partition_text(on_root); });
  m.partition = model::parse_partition(text, m.shape.num_layers, topo.pp);
  if (m.source) require_rank0_checkpoint(topo, m);
}

std::vector<model::StageRange> run_partition(const RankModel& m, int pp, const std::vector<int64_t>& lengths,
                                             const std::vector<int64_t>& scored, const std::string& profiled) {
  const int layers = m.shape.num_layers;
  if (m.partition_given) return m.partition;
  if (!profiled.empty()) {
    try {
      return model::parse_partition(profiled, layers, pp);
    } catch (const UserError&) {
      // A profile of another model or layout: the identity check names what differs.
    }
  }
  // Scoring tokens puts the LM head on the last stage's chunks: it gets fewer layers.
  return model::run_default_partition(m.shape, pp, lengths, scored);
}

model::StageWeights load_rank_weights(const dist::Topology& topo, const RankModel& m,
                                      const model::LayerSink& take_layer) {
  model::StageWeights weights;
  dist::checked_step(MPI_COMM_WORLD, [&] {
    weights = model::load_stage_weights(m.config(), *m.source->tensors, m.partition[topo.stage], topo.first_stage(),
                                        topo.last_stage(), m.shard, take_layer);
  });
  for (const auto& warning : weights.record.warnings)
    std::fprintf(stderr, "warning: rank %d: %s\n", topo.world_rank, warning.c_str());
  return weights;
}

std::string agree_on_weights_identity(const RankModel& m, const std::vector<model::BlockDigest>& loaded) {
  const dist::RootOnly<std::vector<std::string>> all = dist::gather_on_root(MPI_COMM_WORLD, model::serialize(loaded));
  return dist::decide_on_root(MPI_COMM_WORLD, [&] {
    std::vector<model::BlockDigest> blocks;
    for (const std::string& text : *all) {
      std::vector<model::BlockDigest> of_rank = model::deserialize_digests(text);
      blocks.insert(blocks.end(), of_rank.begin(), of_rank.end());
    }
    return model::combine_digests(blocks, model::expected_tensors(m.config()));
  });
}

std::vector<int64_t> share_prompts(const dist::Topology& topo, io::PromptSet& prompts, bool last_stage_scores) {
  std::vector<int64_t> lengths = topo.is_writer() ? prompts.lengths() : std::vector<int64_t>();
  dist::broadcast_vector(lengths, MPI_COMM_WORLD);
  // Every rank knows where each prompt's scores start: the last stage skips the LM head
  // before it, and every rank plans the same prefix reuse.
  dist::broadcast_vector(prompts.score_start, MPI_COMM_WORLD);
  const bool needs_tokens = topo.first_stage() || (last_stage_scores && topo.last_stage());
  if ((last_stage_scores && topo.pp > 1) || topo.cp > 1) {
    // Stage 0 and the last stage (or with CP, stage 0's several TP groups): one broadcast
    // over the world, kept only where it is read (4 bytes a token: 4 MiB for a million,
    // briefly on the other stages too).
    dist::broadcast_vector(prompts.tokens, MPI_COMM_WORLD);
    if (!needs_tokens) std::vector<int32_t>().swap(prompts.tokens);
  } else if (topo.first_stage()) {  // world rank 0 is TP rank 0 of stage 0: the root of this group
    dist::broadcast_vector(prompts.tokens, topo.tp_comm);
  }
  if (needs_tokens) {
    prompts.offsets.assign(1, 0);
    for (int64_t length : lengths) prompts.offsets.push_back(prompts.offsets.back() + length);
  }
  return lengths;
}

nlohmann::json placed_model_identity(const dist::Topology& topo, const RankModel& m) {
  nlohmann::json identity = {{"model_config", m.config_json},
                             {"pp", topo.pp},
                             {"tp", topo.tp},
                             {"layer_partition", model::partition_text(m.partition)}};
  if (topo.cp > 1) identity["cp"] = topo.cp;  // (absent at cp 1: profiles made before CP still match)
  return identity;
}

}  // namespace pf::pipeline
