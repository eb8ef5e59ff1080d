// Rank set-up steps (see rank_setup.hpp).
#include "pipeline/rank_setup.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "dist/checked_step.hpp"
#include "dist/collectives.hpp"
#include "model/presets.hpp"

namespace pf::pipeline {

RankModel open_rank_model(const dist::Topology& topo, const std::string& model_flag, uint64_t seed,
                          const std::string& partition_text, bool with_weights) {
  RankModel m;
  dist::checked_step(MPI_COMM_WORLD, [&] {
    if (with_weights) {
      m.source = model::open_model(model_flag, seed);
      m.config_json = model::to_json(m.config());
      model::validate_tensor_parallel(m.config(), topo.tp);
      if (topo.is_writer() && !m.source->synthetic)
        model::validate_tensors(m.config(), *m.source->tensors, model_flag);
    } else if (model_flag.rfind("synthetic:", 0) == 0) {
      m.config_json = model::to_json(model::preset_config(model_flag.substr(10)));
    } else {  // a model directory, or (the emulator needs nothing else) a config.json itself
      const std::string path = std::filesystem::is_regular_file(model_flag)
                                   ? model_flag
                                   : (std::filesystem::path(model_flag) / "config.json").string();
      m.config_json = model::read_config_json(path);
    }
    m.shape = sim::shape_from_json(m.config_json, model_flag);
    const int layers = m.shape.num_layers;
    m.partition = partition_text.empty() ? model::default_partition(layers, topo.pp)
                                         : model::parse_partition(partition_text, layers, topo.pp);
  });
  if (m.source) {
    m.shard = model::make_shard_spec(m.config(), topo.tp, topo.tp_rank);
  } else {
    const model::VocabSlice vocab = model::vocab_slice(m.shape.vocab_size, topo.tp, topo.tp_rank);
    m.shard.tp = topo.tp;
    m.shard.tp_rank = topo.tp_rank;
    m.shard.vocab_begin = vocab.begin;
    m.shard.vocab_count = vocab.count;
  }
  return m;
}

model::StageWeights load_rank_weights(const dist::Topology& topo, const RankModel& m) {
  model::StageWeights weights;
  dist::checked_step(MPI_COMM_WORLD, [&] {
    weights = model::load_stage_weights(m.config(), *m.source->tensors, m.partition[topo.stage], topo.first_stage(),
                                        topo.last_stage(), m.shard);
  });
  for (const auto& warning : weights.warnings) std::fprintf(stderr, "warning: rank %d: %s\n", topo.world_rank, warning.c_str());
  return weights;
}

namespace {

template <typename T>
void broadcast_vector(std::vector<T>& values, MPI_Comm comm) {
  std::vector<char> bytes(values.size() * sizeof(T));
  if (!bytes.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  dist::broadcast_bytes(bytes, 0, comm);
  values.resize(bytes.size() / sizeof(T));
  if (!bytes.empty()) std::memcpy(values.data(), bytes.data(), bytes.size());
}

}  // namespace

std::vector<int64_t> share_prompts(const dist::Topology& topo, io::PromptSet& prompts) {
  std::vector<int64_t> lengths = topo.is_writer() ? prompts.lengths() : std::vector<int64_t>();
  broadcast_vector(lengths, MPI_COMM_WORLD);
  if (topo.first_stage()) {  // world rank 0 is TP rank 0 of stage 0: the root of this group
    broadcast_vector(prompts.tokens, topo.tp_comm);
    prompts.offsets.assign(1, 0);
    for (int64_t length : lengths) prompts.offsets.push_back(prompts.offsets.back() + length);
  }
  return lengths;
}

nlohmann::json placement_identity(const dist::Topology& topo, const RankModel& m, const std::string& backend) {
  return {{"model_config", m.config_json},
          {"pp", topo.pp},
          {"tp", topo.tp},
          {"layer_partition", model::partition_text(m.partition)},
          {"backend", backend}};
}

}  // namespace pf::pipeline
