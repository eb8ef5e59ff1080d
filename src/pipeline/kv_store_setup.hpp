// --kv-store DIR on every rank (kvcache/kv_store.hpp). Before the plan: which prompts can load
// a prefix from which entry (rank 0 lists the entries of this model and precision, whatever
// layout wrote them, and matches their tokens with the prompts'; every rank checks the files of
// each candidate that hold its layers and heads (kv_source.hpp): metadata and data checksum;
// an entry that fails anywhere is not used, and its prompts compute the prefix). During the run: a prefix's rows for
// the stage loop to load, and an exporter that writes every prompt into DIR/.incoming-RUN. At the end: every prompt all
// ranks finished becomes an entry.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "compute/backend_kind.hpp"
#include "dist/root_decision.hpp"
#include "dist/topology.hpp"
#include "io/prompts_h5.hpp"
#include "io/results_h5.hpp"
#include "io/safetensors.hpp"
#include "kvcache/kv_export.hpp"
#include "kvcache/kv_source.hpp"
#include "kvcache/kv_store.hpp"
#include "pipeline/rank_setup.hpp"
#include "sched/batch_plan.hpp"

namespace pf::pipeline {

class KvStoreRun {
 public:
  // Collective. `done`: the run's resume state (every rank). With `load_prefixes` false the
  // store is only written to.
  // `scores`: the token rows the run scores (--logprobs, --top-k, --hidden-states mean's
  // final-norm rows): it loads only entries that hold them (stored by a run that scored at least
  // as much) and stores its own with its KV.
  // `limit_bytes`: --kv-store-limit (0: none).
  // `backend` and `cpu_dtype`: the cache's precision is part of an entry's key (a cuda or a
  // --dtype bf16 run's KV is not lent to a float32 cpu run, nor the other way: the results
  // would then move by more than float32 rounding).
  KvStoreRun(const dist::Topology& topology, const RankModel& rank_model, const std::string& dir,
             const io::PromptSet& prompts, const std::vector<int64_t>& lengths, const std::vector<char>& done,
             int page_size, bool load_prefixes, compute::BackendKind backend, io::Dtype cpu_dtype,
             kv::ScoresLayout scores = {}, uint64_t limit_bytes = 0);
  KvStoreRun(const KvStoreRun&) = delete;
  KvStoreRun& operator=(const KvStoreRun&) = delete;

  // Rank 0: per prompt, the prefix an entry offers ({tokens, -1, entry}; tokens 0: none), by the
  // rule of in-batch reuse (a page multiple strictly below the shared length and the prompt's).
  const std::vector<sched::PrefixReuse>& offers() const { return offers_; }
  // Every rank, once the plan is made: the exporter of this run's prompts, each storing only
  // the rows after the prefix it takes from an entry or from another prompt of the batch.
  void start(const std::vector<sched::PrefixReuse>& reuse);
  kv::KvExporter& exporter() { return *exporter_; }
  // Rows [pos0, pos0 + count) of entry `entry`'s KV on this rank, in StageCompute::read_kv's layout.
  void read_prefix(int entry, int64_t pos0, int count, float* keys, float* values);
  // Rank 0: token rows [at, at + count) of entry `entry`, as io::ResultWriter::read_token_rows
  // gives them (kvcache/entry_scores.hpp).
  void read_scores(int entry, int64_t at, int count, const io::TokenRowsOut& rows) const;
  // --hidden-states mean, on the last stage's TP rank 0: the float64 sum of entry `entry`'s
  // final-norm rows [0, c); and each computed chunk's rows, kept for the prompt's entry.
  std::vector<double> hidden_prefix_sum(int entry, int64_t c) const;
  void keep_hidden_rows(int prompt, int64_t start, int count, const float* rows);
  // Collective. Waits for every rank's writes, then rank 0 publishes each prompt every rank
  // finished (with its token rows from `results`, in a scoring run) and, with a limit
  // (--kv-store-limit), evicts the least recently used entries no run is using. The first
  // failure, if any (agreed on every rank).
  std::optional<std::string> finish(const io::PromptSet& prompts, const io::ResultWriter* results);

 private:
  // The constructor's steps, each collective.
  std::vector<kv::StoreEntry> open_incoming(bool load_prefixes);
  std::map<std::string, std::unique_ptr<kv::KvSource>> check_offers(const std::vector<kv::StoreEntry>& all,
                                                                    const io::PromptSet& prompts,
                                                                    const std::vector<char>& done, int page_size);
  dist::RootOnly<std::map<int, std::string>> check_files(const nlohmann::json& checking,
                                                         std::map<std::string, std::unique_ptr<kv::KvSource>>& checked);
  void share_chosen_entries(const std::vector<kv::StoreEntry>& all);
  void note_entries_passed_over() const;                // rank 0, while listing
  void evict(const std::set<std::string>& ours) const;  // rank 0, after publishing

  const dist::Topology& topo_;
  const RankModel& model_;
  const std::string dir_;
  std::string incoming_, key_, model_identity_, precision_;
  kv::KvExportLayout layout_;            // this rank's files
  std::vector<kv::StoreEntry> entries_;  // the candidates checked on every rank
  std::vector<sched::PrefixReuse> offers_;
  std::vector<int64_t> lengths_;
  std::vector<uint64_t> token_hashes_;
  std::vector<std::string> parents_;  // per prompt: the entry holding its stored prefix ("": none)
  std::vector<int64_t> firsts_;       // per prompt: the tokens that entry holds for it
  std::unique_ptr<kv::KvExporter> exporter_;
  std::vector<std::unique_ptr<kv::KvSource>> sources_;  // per entry: this rank's rows of it
  std::set<std::string> damaged_;  // rank 0: entry names found damaged, which this run's copies replace
  // This rank's locks on the entries it checks, loads and publishes, one per directory (kv_store.hpp).
  std::map<std::string, kv::EntryUse> uses_;
  static std::vector<kv::HiddenRowsPart> hidden_chain(const std::vector<kv::KvSourceFiles>& segments);
  kv::ScoresLayout scores_;
  std::map<int, std::unique_ptr<kv::HiddenRowsWriter>> hidden_writers_;  // the last stage's TP rank 0
  std::optional<std::string> hidden_error_;
  // Rank 0: each checked entry's token rows (by prompt directory) with the checksums of their
  // pieces, which every read of them is held to (kv::read_entry_scores).
  std::map<std::string, kv::ScoresLayout> verified_scores_;
  uint64_t limit_bytes_ = 0;
};

}  // namespace pf::pipeline
