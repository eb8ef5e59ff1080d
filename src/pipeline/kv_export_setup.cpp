// KV export set-up and finish (see kv_export_setup.hpp).
#include "pipeline/kv_export_setup.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "dist/collectives.hpp"
#include "dist/error_agreement.hpp"
#include "dist/root_decision.hpp"
#include "io/fnv1a.hpp"
#include "kvcache/kv_source.hpp"

namespace pf::pipeline {

// The layout of (stage, tp_rank): the KV heads of the rank's weight shard
// (model::make_shard_spec), whole heads in contiguous blocks per TP rank.
kv::KvExportLayout export_layout(const RankModel& m, const std::string& dir, const std::string& identity, int stage,
                                 int tp, int tp_rank, io::Dtype dtype) {
  const model::ModelConfig& c = m.config();
  kv::KvExportLayout layout;
  layout.dir = dir;
  layout.model_identity = identity;
  layout.stage = stage;
  layout.tp_rank = tp_rank;
  layout.layer_begin = m.partition[stage].first;
  layout.layers = m.partition[stage].count;
  layout.total_layers = c.num_layers;
  layout.dtype = dtype;
  if (c.is_mla()) {  // every TP rank holds the whole latent row: each file has it
    layout.latent = true;
    layout.kv_lora_rank = c.mla.kv_lora_rank;
    layout.kv_heads = layout.total_kv_heads = 1;
    layout.head_dim = c.mla.latent_width();
    return layout;
  }
  layout.kv_heads = model::make_shard_spec(c, tp, tp_rank).kv_heads;
  layout.kv_head_begin = tp_rank * layout.kv_heads;
  layout.total_kv_heads = c.num_kv_heads;
  layout.head_dim = c.head_dim;
  return layout;
}

ExportNames export_names(const RankModel& m, const io::PromptSet& prompts, const std::vector<int64_t>& lengths) {
  ExportNames names;
  names.model_identity = dist::decide_on_root(MPI_COMM_WORLD, [&] {
    for (int p = 0; p < prompts.num_prompts(); ++p) {  // (the prompts' ids are rank 0's)
      const int32_t* ids = prompts.tokens.data() + prompts.offsets[p];
      names.token_hashes.push_back(io::Fnv1a().add(ids, sizeof(int32_t) * lengths[p]).value);
    }
    return io::Fnv1a().add(m.config_json.dump()).add(m.weights_fingerprint).hex();
  });
  dist::broadcast_vector(names.token_hashes, MPI_COMM_WORLD);
  return names;
}

KvExportStart start_kv_export(const dist::Topology& topo, const RankModel& m, const std::string& dir, io::Dtype dtype,
                              const io::PromptSet& prompts, const std::vector<int64_t>& lengths,
                              const std::vector<char>& finished) {
  ExportNames names = export_names(m, prompts, lengths);
  std::vector<uint64_t>& hashes = names.token_hashes;
  const kv::KvExportLayout layout =
      export_layout(m, dir, names.model_identity, topo.stage, topo.tp, topo.tp_rank, dtype);

  // A prompt the output holds whose files do not hold this rank's layers and heads whole
  // (missing, or failing their checks): every rank says which, and what it found wrong with
  // the first. Files of another layout serve (a run resumed onto another allocation): each
  // prompt's files say what they hold, and index.json lists them.
  std::vector<int> missing;
  std::string first_problem;
  for (int p = 0; p < static_cast<int>(finished.size()); ++p) {
    if (!finished[p]) continue;
    std::string problem;
    const kv::KvSourceFiles files{dir + "/" + kv::kv_prompt_dir_name(p), p, lengths[p], hashes[p], -1, {}};
    if (kv::KvSource::open(layout, files, &problem)) continue;
    if (missing.empty()) first_problem = problem;
    missing.push_back(p);
  }
  const dist::RootOnly<std::vector<std::vector<int>>> all = dist::gather_values_on_root(MPI_COMM_WORLD, missing);
  const dist::RootOnly<std::vector<std::string>> problems = dist::gather_on_root(MPI_COMM_WORLD, first_problem);
  KvExportStart start;
  if (all.here()) {
    std::vector<char> again(finished.size(), 0);
    std::string example;
    for (size_t rank = 0; rank < all->size(); ++rank) {
      for (int p : (*all)[rank]) again.at(p) = 1;
      if (example.empty() && !(*all)[rank].empty()) example = "rank " + std::to_string(rank) + ": " + (*problems)[rank];
    }
    std::vector<int> prompts_again;
    for (int p = 0; p < static_cast<int>(again.size()); ++p)
      if (again[p]) prompts_again.push_back(p);
    if (!prompts_again.empty()) {
      std::fprintf(stderr,
                   "note: %zu finished prompt(s) (first: %d) have no usable KV export in %s (%s): computing them "
                   "again\n",
                   prompts_again.size(), prompts_again[0], dir.c_str(), example.c_str());
    }
    start.prompts_again = dist::RootOnly<std::vector<int>>::on_root(std::move(prompts_again));
  }
  start.exporter = std::make_unique<kv::KvExporter>(layout, lengths, std::move(hashes));
  return start;
}

nlohmann::json export_index(const dist::Topology& topo, const RankModel& m, const kv::KvExporter& exporter,
                            const std::vector<int>& prompts) {
  const model::ModelConfig& c = m.config();
  nlohmann::json shards = nlohmann::json::array();
  for (int s = 0; s < topo.pp; ++s)
    for (int r = 0; r < topo.tp; ++r) {
      const kv::KvExportLayout l = export_layout(m, "", "", s, topo.tp, r, exporter.layout().dtype);
      shards.push_back({{"stage", s},
                        {"tp_rank", r},
                        {"layers", {l.layer_begin, l.layer_begin + l.layers}},
                        {"kv_heads", {l.kv_head_begin, l.kv_head_begin + l.kv_heads}}});
    }
  nlohmann::json listed = nlohmann::json::object();
  for (int p : prompts) {
    nlohmann::json files = nlohmann::json::array();
    for (int s = 0; s < topo.pp; ++s)
      for (int r = 0; r < topo.tp; ++r) files.push_back(kv::kv_file_name(p, s, r));
    listed[std::to_string(p)] = {{"tokens", exporter.length(p)},
                                 {"tokens_fnv1a", kv::tokens_hash_text(exporter.tokens_hash(p))},
                                 {"files", files}};
  }
  const kv::KvExportLayout& layout = exporter.layout();
  nlohmann::json index = {{"format", kv::kKvExportFormat},
                          {"model_identity", layout.model_identity},
                          {"model_config", m.config_json},
                          {"dtype", io::dtype_name(layout.dtype)},
                          {"num_layers", c.num_layers},
                          {"num_kv_heads", layout.total_kv_heads},
                          {"head_dim", layout.head_dim},
                          {"pp", topo.pp},
                          {"tp", topo.tp},
                          {"shards", shards},
                          {"prompts", listed}};
  if (layout.latent) {  // (a dense index keeps the keys it always had)
    index["cache"] = "latent";
    index["kv_lora_rank"] = layout.kv_lora_rank;
    index["qk_rope_head_dim"] = layout.head_dim - layout.kv_lora_rank;
  }
  return index;
}

namespace {

// The KV files of prompt p in DIR, sorted ("prompt-000007/stage00_tp00.safetensors", ...).
// Those of layouts other than this run's go first from the prompts this run exported (left by
// an earlier run of another layout whose export of them failed its checks).
std::vector<std::string> prompt_files(const std::string& dir, int p, const dist::Topology& topo, bool exported_here) {
  static const std::regex pattern("stage[0-9]+_tp[0-9]+\\.safetensors");
  std::set<std::string> ours;
  for (int s = 0; s < topo.pp; ++s)
    for (int r = 0; r < topo.tp; ++r) ours.insert(kv::kv_file_name(p, s, r));
  std::vector<std::string> files;
  std::error_code error;
  for (const auto& item : std::filesystem::directory_iterator(dir + "/" + kv::kv_prompt_dir_name(p), error)) {
    const std::string name = item.path().filename().string();
    if (!std::regex_match(name, pattern)) continue;
    const std::string relative = kv::kv_prompt_dir_name(p) + "/" + name;
    if (exported_here && ours.count(relative) == 0)
      std::filesystem::remove(item.path(), error);
    else
      files.push_back(relative);
  }
  std::sort(files.begin(), files.end());
  return files;
}

// DIR/index.json (rank 0): the prompts the output holds, each with the files holding it.
std::optional<std::string> write_index(const dist::Topology& topo, const RankModel& m, const std::string& dir,
                                       kv::KvExporter& exporter, const io::ResultWriter& results) {
  std::vector<int> finished;
  const std::vector<char>& done = results.completed();
  for (int p = 0; p < static_cast<int>(done.size()); ++p)
    if (done[p]) finished.push_back(p);
  nlohmann::json index = export_index(topo, m, exporter, finished);
  const std::vector<int> exported = exporter.completed_prompts();
  for (int p : finished)
    index["prompts"][std::to_string(p)]["files"] =
        prompt_files(dir, p, topo, std::find(exported.begin(), exported.end(), p) != exported.end());
  const std::string path = dir + "/index.json", partial = path + ".partial." + std::to_string(::getpid());
  const std::string where = " (rank " + std::to_string(topo.world_rank) + ")";
  {
    errno = 0;
    std::ofstream out(partial);
    out << index.dump(1) << "\n";
    if (!out.flush()) {
      const int reason = errno;
      std::error_code ignored;
      std::filesystem::remove(partial, ignored);  // no half-written index left behind
      return "--save-kv: cannot write " + partial + ": " + (reason ? std::strerror(reason) : "write failed") + where;
    }
  }
  std::error_code error;
  std::filesystem::rename(partial, path, error);
  if (error) {
    const std::string reason = error.message();
    std::filesystem::remove(partial, error);
    return "--save-kv: cannot rename " + partial + " to index.json: " + reason + where;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> finish_kv_export(const dist::Topology& topo, const RankModel& m, const std::string& dir,
                                            kv::KvExporter& exporter, const io::ResultWriter* results) {
  std::optional<std::string> error = exporter.finish();
  if (error) error = "--save-kv: " + *error + " (rank " + std::to_string(topo.world_rank) + ")";
  // Every rank's files are written (or failed) before rank 0 lists them.
  error = dist::agree_on_errors(error, MPI_COMM_WORLD);
  if (topo.is_writer() && !error) error = write_index(topo, m, dir, exporter, *results);
  return dist::agree_on_errors(error, MPI_COMM_WORLD);
}

}  // namespace pf::pipeline
