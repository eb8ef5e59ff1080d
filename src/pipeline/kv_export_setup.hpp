// Setting up and finishing the KV export of a run (--save-kv DIR, kvcache/kv_export.hpp) on
// every rank: what each rank exports, which finished prompts a resumed run must compute again
// because their export is missing somewhere, and DIR/index.json at the end.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "dist/root_decision.hpp"
#include "dist/topology.hpp"
#include "io/prompts_h5.hpp"
#include "io/results_h5.hpp"
#include "kvcache/kv_export.hpp"
#include "pipeline/rank_setup.hpp"

namespace pf::pipeline {

// What names a run's exports: the model identity (FNV-1a of config.json and the weights
// fingerprint) and each prompt's token hash. Collective: rank 0 computes, every rank gets them.
struct ExportNames {
  std::string model_identity;
  std::vector<uint64_t> token_hashes;
};
ExportNames export_names(const RankModel& rank_model, const io::PromptSet& prompts,
                         const std::vector<int64_t>& lengths);

// What (stage, tp_rank) exports into `dir`: its layers and the KV heads of its weight shard,
// in files of `dtype` (F32 or BF16).
kv::KvExportLayout export_layout(const RankModel& rank_model, const std::string& dir, const std::string& identity,
                                 int stage, int tp, int tp_rank, io::Dtype dtype);

// The index.json of an export holding `prompts` (rank 0).
nlohmann::json export_index(const dist::Topology& topology, const RankModel& rank_model, const kv::KvExporter& exporter,
                            const std::vector<int>& prompts);

// What starting an export decides: this rank's exporter into `dir`, and (rank 0) the
// finished prompts to compute again because some rank's file for them is missing or fails
// its checks (a run killed between the two, or started without --save-kv), said in a note.
struct KvExportStart {
  std::unique_ptr<kv::KvExporter> exporter;
  dist::RootOnly<std::vector<int>> prompts_again;
};

// Collective. `prompts` holds the token ids on rank 0, which hashes them; `finished`: the
// prompts the output holds (every rank). Reads the directory; changes no file.
KvExportStart start_kv_export(const dist::Topology& topology, const RankModel& rank_model, const std::string& dir,
                              io::Dtype dtype, const io::PromptSet& prompts, const std::vector<int64_t>& lengths,
                              const std::vector<char>& finished);

// Collective. Waits for every rank's writes. Rank 0 then writes dir/index.json listing the
// prompts the output holds as finished, unless a rank failed: the first failure is returned
// (rank 0: its message; elsewhere a placeholder).
std::optional<std::string> finish_kv_export(const dist::Topology& topology, const RankModel& rank_model,
                                            const std::string& dir, kv::KvExporter& exporter,
                                            const io::ResultWriter* results);

}  // namespace pf::pipeline
