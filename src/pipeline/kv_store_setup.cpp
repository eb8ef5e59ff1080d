// --kv-store on every rank (see kv_store_setup.hpp).
#include "pipeline/kv_store_setup.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "dist/collectives.hpp"
#include "dist/error_agreement.hpp"
#include "dist/root_decision.hpp"
#include "pipeline/kv_export_setup.hpp"
#include "sched/prefix_sharing.hpp"

namespace pf::pipeline {

namespace {

// Why an entry is not used when an eviction holds its lock (not damage: it is not replaced).
constexpr const char* kInUseConflict = "another run is removing it (--kv-store-limit)";

// Rank 0: for each prompt still to compute, the entry sharing the longest prefix with it,
// among those not known to be bad and holding the token scores the run asks for;
// `unscored` counts the entries passed over for want of them.
std::vector<sched::PrefixReuse> match_entries(const std::vector<kv::StoreEntry>& entries, const std::vector<char>& bad,
                                              const io::PromptSet& prompts, const std::vector<char>& done,
                                              int page_size, kv::ScoresLayout wanted, std::set<int>* unscored) {
  std::vector<sched::PrefixReuse> offers(static_cast<size_t>(prompts.num_prompts()));
  for (int p = 0; p < prompts.num_prompts(); ++p) {
    if (p < static_cast<int>(done.size()) && done[p]) continue;
    const int32_t* ids = prompts.tokens.data() + prompts.offsets[p];
    const int64_t length = prompts.offsets[p + 1] - prompts.offsets[p];
    for (int e = 0; e < static_cast<int>(entries.size()); ++e) {
      if (bad[e]) continue;
      const auto& stored = entries[e].ids;
      const int64_t limit = std::min<int64_t>(length, static_cast<int64_t>(stored.size()));
      const int64_t common = std::mismatch(ids, ids + limit, stored.begin()).first - ids;
      const int64_t reused = sched::reusable_prefix(common, page_size);
      const bool scored = entries[e].lends.serves(wanted);
      if (reused > 0 && !scored) unscored->insert(e);
      if (reused > offers[p].tokens && scored) offers[p] = {reused, -1, e};
    }
  }
  return offers;
}

}  // namespace

KvStoreRun::KvStoreRun(const dist::Topology& topo, const RankModel& m, const std::string& dir,
                       const io::PromptSet& prompts, const std::vector<int64_t>& lengths, const std::vector<char>& done,
                       int page_size, bool load_prefixes, compute::BackendKind backend, io::Dtype cpu_dtype,
                       kv::ScoresLayout scores, uint64_t limit_bytes)
    : topo_(topo), model_(m), dir_(dir), scores_(scores), limit_bytes_(limit_bytes) {
  const ExportNames names = export_names(m, prompts, lengths);
  precision_ = compute::backend_name(backend);
  if (backend == compute::BackendKind::kCpu && cpu_dtype == io::Dtype::kBF16) precision_ += "-bf16";
  model_identity_ = names.model_identity;
  key_ = kv::store_key(names.model_identity, precision_);
  const std::vector<kv::StoreEntry> all = open_incoming(load_prefixes);  // rank 0's listing
  // Float32 whatever --kv-dtype: a prefix loaded from the store must give what computing it gives.
  layout_ = export_layout(m, incoming_, names.model_identity, topo.stage, topo.tp, topo.tp_rank, io::Dtype::kF32);
  std::map<std::string, std::unique_ptr<kv::KvSource>> checked = check_offers(all, prompts, done, page_size);
  share_chosen_entries(all);
  for (const auto& e : entries_) sources_.push_back(std::move(checked.at(e.dir)));
  lengths_ = lengths;
  token_hashes_ = names.token_hashes;
}

void KvStoreRun::start(const std::vector<sched::PrefixReuse>& reuse) {
  // A prompt that starts from a prefix (the store's or the batch's) stores its own rows only;
  // its entry names the one holding the prefix: the nearest of the chain that holds rows at
  // its length (a question asked after another names the document, not the other question).
  std::vector<int64_t> firsts(lengths_.size(), 0);
  for (size_t p = 0; p < reuse.size() && p < lengths_.size(); ++p)
    if (reuse[p].tokens > 0 && !reuse[p].restored && (reuse[p].store_entry >= 0 || reuse[p].source >= 0))
      firsts[p] = reuse[p].tokens;
  if (topo_.is_writer()) {                                        // (the names matter where entries are published)
    std::map<std::string, std::pair<std::string, int64_t>> held;  // entry -> (its parent, its first position)
    for (const kv::StoreEntry& entry : entries_)
      for (size_t k = 0; k < entry.chain.size(); ++k)
        held[std::filesystem::path(entry.chain[k]).filename().string()] = {
            k == 0 ? "" : std::filesystem::path(entry.chain[k - 1]).filename().string(),
            entry.segments[k].first_position};
    parents_.assign(lengths_.size(), "");
    std::vector<char> named(lengths_.size(), 0);
    const std::function<void(int)> name_parent = [&](int p) {
      if (named[p]) return;
      named[p] = 1;
      if (firsts[p] == 0) return;
      const sched::PrefixReuse& r = reuse[p];
      std::string parent;
      if (r.store_entry >= 0) {
        parent = std::filesystem::path(entries_.at(r.store_entry).dir).filename().string();
      } else {
        name_parent(r.source);
        parent = kv::store_entry_name(key_, token_hashes_.at(r.source), lengths_.at(r.source));
      }
      std::set<std::string> walked = {parent};
      for (auto it = held.find(parent); it != held.end() && it->second.second >= firsts[p] &&
                                        !it->second.first.empty() && walked.insert(it->second.first).second;
           it = held.find(parent))
        parent = it->second.first;
      parents_[p] = parent;
      // An entry already in the store keeps its own structure (publishing keeps the first copy).
      held.emplace(kv::store_entry_name(key_, token_hashes_.at(p), lengths_.at(p)), std::make_pair(parent, firsts[p]));
    };
    for (int p = 0; p < static_cast<int>(lengths_.size()); ++p) name_parent(p);
  }
  firsts_ = firsts;
  exporter_ =
      std::make_unique<kv::KvExporter>(layout_, lengths_, token_hashes_, kv::KvFileMode::kExport, std::move(firsts));
}

std::vector<kv::StoreEntry> KvStoreRun::open_incoming(bool load_prefixes) {
  // Rank 0 names this run's incoming directory and lists the store's entries of this model.
  std::vector<kv::StoreEntry> all;
  incoming_ = dist::decide_on_root(MPI_COMM_WORLD, [&] {
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    char host[64] = "host";
    ::gethostname(host, sizeof host - 1);
    kv::remove_abandoned_incoming(dir_);
    std::vector<kv::UnusableEntry> unusable;
    if (load_prefixes) {
      all = kv::list_store_entries(dir_, key_, &unusable);
      note_entries_passed_over();
      // The final-norm rows an entry lends are those of every entry of its chain.
      for (kv::StoreEntry& entry : all) {
        entry.lends.hidden_rows = true;
        for (const kv::KvSourceFiles& f : entry.segments)
          entry.lends.hidden_rows =
              entry.lends.hidden_rows &&
              kv::entry_hidden_rows(f.prompt_dir, f.tokens, f.first_position, model_.shape.hidden_size);
      }
    }
    for (const kv::UnusableEntry& entry : unusable) {
      std::fprintf(stderr, "warning: --kv-store: not using %s/%s (%s): a run that stores the same prompt replaces it\n",
                   dir_.c_str(), entry.name.c_str(), entry.reason.c_str());
      damaged_.insert(entry.name);
    }
    return dir_ + "/.incoming-" + host + "-" + std::to_string(::getpid()) + "-" +
           std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now).count());
  });
  return all;
}

// Rank 0: says how many entries the run cannot load and why (another model or precision), so
// a store that silently lends nothing is not a mystery.
void KvStoreRun::note_entries_passed_over() const {
  const std::map<std::string, int> reasons = kv::entries_passed_over(dir_, key_, model_identity_);
  if (reasons.empty()) return;
  int total = 0;
  std::string text;
  for (const auto& [why, count] : reasons) {
    total += count;
    text += (text.empty() ? "" : ", ") + std::to_string(count) + " of " + why;
  }
  std::fprintf(stderr,
               "note: --kv-store %s: passed over %d entr%s (%s): a run loads only entries of its own model and "
               "precision (any layout)\n",
               dir_.c_str(), total, total == 1 ? "y" : "ies", text.c_str());
}

// Rounds: rank 0 offers each prompt its best entry not yet found bad; every rank checks its
// own file of each entry not checked before (metadata and every byte against the checksum);
// an entry that fails on any rank is bad, and its prompts look again. Each round checks only
// what some prompt would load, so a store of many entries costs the reads of the ones used.
std::map<std::string, std::unique_ptr<kv::KvSource>> KvStoreRun::check_offers(const std::vector<kv::StoreEntry>& all,
                                                                              const io::PromptSet& prompts,
                                                                              const std::vector<char>& done,
                                                                              int page_size) {
  std::vector<char> bad(all.size(), 0), good(all.size(), 0);
  std::map<std::string, std::unique_ptr<kv::KvSource>> checked;  // this rank's rows of the entries that passed
  std::set<int> unscored;
  const auto note_unscored = [&] {  // rank 0, once the offers are settled
    if (unscored.empty()) return;
    std::string asked;
    if (scores_.logprobs) asked += "--logprobs";
    if (scores_.top_k > 0)
      asked += (asked.empty() ? "" : ", ") + std::string("--top-k ") + std::to_string(scores_.top_k) + " or more";
    if (!scores_.token_set.empty()) asked += (asked.empty() ? "" : ", ") + std::string("the same --token-ids");
    if (scores_.hidden_rows) asked += (asked.empty() ? "" : ", ") + std::string("--hidden-states mean");
    std::printf(
        "note: --kv-store: %zu entr%s sharing a prefix with this run's prompts hold not all it scores (%s): "
        "stored by a run that did not score as much (or scored only a span of their prompt), they lend it "
        "nothing\n",
        unscored.size(), unscored.size() == 1 ? "y" : "ies", asked.c_str());
  };
  for (;;) {
    std::vector<int> to_check;  // indices into `all` (rank 0)
    const nlohmann::json checking = nlohmann::json::parse(dist::decide_on_root(MPI_COMM_WORLD, [&] {
      offers_ = match_entries(all, bad, prompts, done, page_size, scores_, &unscored);
      for (const auto& offer : offers_)
        if (offer.tokens > 0 && !good[offer.store_entry] &&
            std::find(to_check.begin(), to_check.end(), offer.store_entry) == to_check.end())
          to_check.push_back(offer.store_entry);
      nlohmann::json list = nlohmann::json::array();
      for (int e : to_check) {
        nlohmann::json segments = nlohmann::json::array();
        for (const kv::KvSourceFiles& f : all[e].segments)
          segments.push_back({{"prompt_dir", f.prompt_dir},
                              {"prompt", f.prompt},
                              {"tokens", f.tokens},
                              {"hash", f.tokens_hash},
                              {"first", f.first_position}});
        list.push_back({{"dir", all[e].dir}, {"chain", all[e].chain}, {"segments", segments}});
      }
      return list.dump();
    }));
    if (checking.empty()) {
      if (topo_.is_writer()) note_unscored();
      return checked;
    }
    const dist::RootOnly<std::map<int, std::string>> failed = check_files(checking, checked);
    if (!failed.here()) continue;
    for (size_t i = 0; i < to_check.size(); ++i) {
      const int e = to_check[i];
      const auto why = failed->find(static_cast<int>(i));
      (why != failed->end() ? bad : good)[e] = 1;
      if (why == failed->end()) continue;
      std::fprintf(stderr,
                   "warning: --kv-store: not using %s (%s): its prompts compute that prefix, and a run that "
                   "stores the same prompt replaces it\n",
                   all[e].dir.c_str(), why->second.c_str());
      // (An entry another run is evicting is not damaged: nothing replaces it.)
      if (why->second.find(kInUseConflict) == std::string::npos)
        damaged_.insert(std::filesystem::path(all[e].dir).filename().string());
    }
  }
}

// One round's checks: the files of each listed entry holding this rank's layers and heads; the
// sources of those that pass go into `checked`. Rank 0 gets every failure, by index in the
// list, with its reason.
dist::RootOnly<std::map<int, std::string>> KvStoreRun::check_files(
    const nlohmann::json& checking, std::map<std::string, std::unique_ptr<kv::KvSource>>& checked) {
  nlohmann::json problems = nlohmann::json::object();
  for (size_t i = 0; i < checking.size(); ++i) {
    const nlohmann::json& entry = checking[i];
    // In use from before the check to the end of the run, with every entry of its chain: no
    // other run's eviction removes them.
    // One lock per directory and process: POSIX locks are the process's, and closing a second
    // descriptor of a file this run already holds would release the first one's lock.
    std::map<std::string, kv::EntryUse> uses;
    std::string problem;
    for (const auto& item : entry["chain"]) {
      const std::string dir = item.get<std::string>();
      if (uses_.count(dir) || uses.count(dir)) continue;
      std::optional<kv::EntryUse> use = kv::EntryUse::take(dir);
      if (!use) {
        problem = dir + ": " + kInUseConflict;
        break;
      }
      uses.emplace(dir, std::move(*use));
    }
    std::unique_ptr<kv::KvSource> source;
    if (problem.empty()) {
      std::vector<kv::KvSourceFiles> segments;
      for (const auto& f : entry["segments"])
        segments.push_back({f["prompt_dir"].get<std::string>(),
                            f["prompt"].get<int>(),
                            f["tokens"].get<int64_t>(),
                            f["hash"].get<uint64_t>(),
                            -1,
                            {},
                            f["first"].get<int64_t>()});
      source = kv::KvSource::open(layout_, segments, &problem);
    }
    // The last stage sums the entry's final-norm rows: they must be whole, along the chain.
    if (source && scores_.hidden_rows && topo_.world_rank == topo_.last_stage_leader()) {
      std::vector<kv::HiddenRowsPart> chain;
      for (const auto& f : entry["segments"])
        chain.push_back({f["prompt_dir"].get<std::string>(), f["tokens"].get<int64_t>(), f["first"].get<int64_t>()});
      try {
        kv::sum_entry_hidden_rows(chain, model_.shape.hidden_size, chain.back().tokens);
      } catch (const std::exception& e) {
        source.reset();
        problem = e.what();
      }
    }
    // Rank 0 copies the entry's token rows: they must be whole, and each read is held to the
    // checksums of this check (read_scores).
    if (source && topo_.is_writer() && scores_.row_shape().any()) {
      const std::string prompt_dir = entry["segments"].back()["prompt_dir"].get<std::string>();
      std::optional<kv::ScoresLayout> rows =
          kv::entry_scores(prompt_dir, entry["segments"].back()["tokens"].get<int64_t>(), /*verify=*/true);
      if (rows) {
        verified_scores_[prompt_dir] = std::move(*rows);
      } else {
        source.reset();
        problem = "its token scores (scores.json, scores.bin) are incomplete or do not match their checksum";
      }
    }
    if (source) {
      for (auto& [dir, use] : uses) uses_.emplace(dir, std::move(use));
      checked[entry["dir"].get<std::string>()] = std::move(source);
    } else {
      problems[std::to_string(i)] = problem;
    }
  }
  // (A path that is not UTF-8 must not make this rank throw while the others wait.)
  const std::string report_text = problems.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const dist::RootOnly<std::vector<std::string>> reports = dist::gather_on_root(MPI_COMM_WORLD, report_text);
  if (!reports.here()) return {};
  std::map<int, std::string> failed;
  for (const std::string& report : *reports) {
    const nlohmann::json parsed = nlohmann::json::parse(report);  // (items() must not outlive it)
    for (const auto& [i, why] : parsed.items()) failed.emplace(std::stoi(i), why.get<std::string>());
  }
  return dist::RootOnly<std::map<int, std::string>>::on_root(std::move(failed));
}

// The entries the plan loads, renumbered (rank 0's offers point at them); every rank learns
// their directories.
void KvStoreRun::share_chosen_entries(const std::vector<kv::StoreEntry>& all) {
  const nlohmann::json chosen_list = nlohmann::json::parse(dist::decide_on_root(MPI_COMM_WORLD, [&] {
    std::map<int, int> renumber;
    for (auto& offer : offers_) {
      if (offer.tokens == 0) continue;
      auto [it, fresh] = renumber.emplace(offer.store_entry, static_cast<int>(entries_.size()));
      if (fresh) entries_.push_back(all[offer.store_entry]);
      offer.store_entry = it->second;
    }
    nlohmann::json list = nlohmann::json::array();
    for (const auto& e : entries_) {
      nlohmann::json segments = nlohmann::json::array();
      for (const kv::KvSourceFiles& f : e.segments)
        segments.push_back({{"prompt_dir", f.prompt_dir}, {"tokens", f.tokens}, {"first", f.first_position}});
      list.push_back({{"dir", e.dir}, {"prompt", e.prompt}, {"segments", segments}});
    }
    return list.dump();
  }));
  if (!topo_.is_writer())
    for (const auto& item : chosen_list) {
      kv::StoreEntry entry;
      entry.dir = item["dir"].get<std::string>();
      entry.prompt = item["prompt"].get<int>();
      for (const auto& f : item["segments"]) {
        kv::KvSourceFiles part;
        part.prompt_dir = f["prompt_dir"].get<std::string>();
        part.tokens = f["tokens"].get<int64_t>();
        part.first_position = f["first"].get<int64_t>();
        entry.segments.push_back(std::move(part));
      }
      entries_.push_back(std::move(entry));
    }
}

void KvStoreRun::read_prefix(int entry, int64_t pos0, int count, float* keys, float* values) {
  sources_.at(entry)->read(pos0, count, keys, values);
}

void KvStoreRun::read_scores(int entry, int64_t at, int count, const io::TokenRowsOut& rows) const {
  const kv::StoreEntry& e = entries_.at(entry);
  const std::string dir = e.dir + "/" + kv::kv_prompt_dir_name(e.prompt);
  const auto verified = verified_scores_.find(dir);
  if (verified == verified_scores_.end())  // (check_files checks every entry a plan loads)
    throw std::logic_error(dir + ": token rows read from an entry whose scores were not checked");
  kv::read_entry_scores(dir, e.tokens, verified->second, at, count, scores_.row_shape(), rows);
}

std::vector<kv::HiddenRowsPart> KvStoreRun::hidden_chain(const std::vector<kv::KvSourceFiles>& segments) {
  std::vector<kv::HiddenRowsPart> chain;
  for (const kv::KvSourceFiles& f : segments) chain.push_back({f.prompt_dir, f.tokens, f.first_position});
  return chain;
}

std::vector<double> KvStoreRun::hidden_prefix_sum(int entry, int64_t c) const {
  return kv::sum_entry_hidden_rows(hidden_chain(entries_.at(entry).segments), model_.shape.hidden_size, c);
}

void KvStoreRun::keep_hidden_rows(int prompt, int64_t start, int count, const float* rows) {
  if (hidden_error_) return;
  auto open = hidden_writers_.find(prompt);
  if (open == hidden_writers_.end()) {
    // From the prompt's first stored position only (a prompt restored from a checkpoint starts
    // elsewhere: its entry keeps no rows, and lends nothing to runs asking for the mean).
    if (start != firsts_.at(prompt)) return;
    try {
      open = hidden_writers_
                 .emplace(prompt,
                          std::make_unique<kv::HiddenRowsWriter>(incoming_ + "/" + kv::kv_prompt_dir_name(prompt),
                                                                 lengths_.at(prompt), start, model_.shape.hidden_size))
                 .first;
    } catch (const std::exception& e) {
      hidden_error_ = e.what();
      return;
    }
  }
  try {
    open->second->add(start, count, rows);
    if (start + count == lengths_.at(prompt)) hidden_writers_.erase(open);
  } catch (const std::exception& e) {
    hidden_error_ = e.what();
    hidden_writers_.erase(open);
  }
}

std::optional<std::string> KvStoreRun::finish(const io::PromptSet& prompts, const io::ResultWriter* results) {
  std::optional<std::string> error = exporter_ ? exporter_->finish() : std::nullopt;
  if (!error) error = hidden_error_;
  if (error) error = "--kv-store: " + *error + " (rank " + std::to_string(topo_.world_rank) + ")";
  error = dist::agree_on_errors(error, MPI_COMM_WORLD);
  // The entries found damaged are replaced below, under their exclusive lock: every rank lets
  // go of its own hold on them first (one held as part of another entry's chain; its rows
  // were read when the prompts were computed), else this run's own lock keeps them damaged.
  const std::set<std::string> damaged = nlohmann::json::parse(dist::decide_on_root(MPI_COMM_WORLD, [&] {
                                          return nlohmann::json(damaged_).dump();
                                        })).get<std::set<std::string>>();
  for (auto use = uses_.begin(); use != uses_.end();)
    use = damaged.count(std::filesystem::path(use->first).filename().string()) ? uses_.erase(use) : std::next(use);
  // A prompt is an entry once every rank has its file.
  const auto all =
      dist::gather_vector(exporter_ ? exporter_->completed_prompts() : std::vector<int>{}, 0, MPI_COMM_WORLD);
  if (topo_.is_writer() && !error) {
    std::map<int, int> ranks_done;
    for (const auto& prompts_done : all)
      for (int p : prompts_done) ++ranks_done[p];
    std::set<std::string> ours;  // the entries this run loaded or published
    for (const kv::StoreEntry& entry : entries_) ours.insert(std::filesystem::path(entry.dir).filename().string());
    try {
      // Parents before the prompts built on them: rounds, until a round publishes nothing. A
      // prompt whose parent is not in the store (it did not finish) is not published: its
      // files hold its own rows only.
      std::set<int> waiting;
      for (const auto& [p, ranks] : ranks_done)
        if (ranks == topo_.pp * topo_.tp) waiting.insert(p);
      for (bool published = true; published && !waiting.empty();) {
        published = false;
        for (auto it = waiting.begin(); it != waiting.end();) {
          const int p = *it;
          std::string parent = parents_.at(p);
          std::error_code missing;
          // (A parent this run found damaged waits for this run's copy to replace it.)
          if (!parent.empty() &&
              (!std::filesystem::is_directory(dir_ + "/" + parent, missing) || damaged_.count(parent))) {
            ++it;
            continue;
          }
          const int32_t* ids = prompts.tokens.data() + prompts.offsets[p];
          const std::vector<int32_t> copy(ids, ids + (prompts.offsets[p + 1] - prompts.offsets[p]));
          // The store's copy of the parent may be another run's, kept over ours, that holds its
          // own rows only from c on: the child then names the entry up the chain that holds
          // them. A prompt that took its prefix from a copy of itself (the batch's duplicate)
          // adds nothing: its entry is the other's.
          if (!parent.empty()) parent = kv::parent_holding(dir_, parent, firsts_.at(p));
          if (!parents_.at(p).empty() && parent.empty())
            std::printf(
                "note: --kv-store: prompt %d is not stored: the chain of entries holding its first %lld tokens "
                "(from %s) breaks (an index.json missing or unreadable)\n",
                p, static_cast<long long>(firsts_.at(p)), parents_.at(p).c_str());
          if (!parents_.at(p).empty() &&
              (parent.empty() ||
               parent == kv::store_entry_name(key_, exporter_->tokens_hash(p), static_cast<int64_t>(copy.size())))) {
            it = waiting.erase(it);
            continue;
          }
          // A scoring run's entries keep the prompt's token rows, for scoring runs to come;
          // not those of a prompt scored from a later position (/score_start): they lack rows.
          if (results && scores_.row_shape().any() && results->completed().at(p) && prompts.first_scored(p) == 1)
            kv::write_entry_scores(incoming_ + "/" + kv::kv_prompt_dir_name(p), lengths_.at(p), scores_,
                                   [&](int64_t at, int count, const io::TokenRowsOut& rows) {
                                     results->read_token_rows(p, at, count, rows);
                                   });
          nlohmann::json index = export_index(topo_, model_, *exporter_, {p});
          index["precision"] = precision_;  // (with the model identity: what the entry's name hashes)
          if (!parent.empty()) {
            index["parent"] = parent;
            index["parent_tokens"] = firsts_.at(p);
          }
          const std::string name = kv::publish_store_entry(dir_, incoming_, key_, p, copy, exporter_->tokens_hash(p),
                                                           index.dump(1) + "\n", damaged_);
          ours.insert(name);
          damaged_.erase(name);  // (replaced now: a duplicate of this prompt later must keep it)
          // Held until the run ends: its children, published next, must find it there.
          if (!uses_.count(dir_ + "/" + name))
            if (std::optional<kv::EntryUse> use = kv::EntryUse::take(dir_ + "/" + name))
              uses_.emplace(dir_ + "/" + name, std::move(*use));
          it = waiting.erase(it);
          published = true;
        }
      }
    } catch (const std::exception& e) {
      error = std::string("--kv-store: ") + e.what();
    }
    if (limit_bytes_ > 0 && !error) evict(ours);
  }
  // Whatever was not published (a failed write, prompts a stop left unfinished) goes.
  if (topo_.is_writer()) {
    std::error_code ignored;
    std::filesystem::remove_all(incoming_, ignored);
  }
  return dist::agree_on_errors(error, MPI_COMM_WORLD);
}

// Rank 0, after publishing: the store back under --kv-store-limit, least recently used first,
// never an entry this run loaded or added nor one another run is using; said in a note.
void KvStoreRun::evict(const std::set<std::string>& ours) const {
  const kv::Eviction eviction = kv::evict_to_limit(dir_, limit_bytes_, ours);
  const auto text = [](uint64_t bytes) {  // "812 KiB", "3.1 GiB"
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double value = static_cast<double>(bytes);
    int unit = 0;
    for (; value >= 1024 && unit < 4; ++unit) value /= 1024;
    char out[32];
    std::snprintf(out, sizeof out, value < 10 && unit > 0 ? "%.1f %s" : "%.0f %s", value, units[unit]);
    return std::string(out);
  };
  if (!eviction.evicted.empty())
    std::printf("kv store: removed %zu least recently used entr%s (%s) to stay under --kv-store-limit %s\n",
                eviction.evicted.size(), eviction.evicted.size() == 1 ? "y" : "ies",
                text(eviction.bytes_before - eviction.bytes_after).c_str(), text(limit_bytes_).c_str());
  if (eviction.bytes_after > limit_bytes_) {
    const std::string in_use =
        eviction.in_use > 0 ? " and " + std::to_string(eviction.in_use) + " entries other runs are using" : "";
    std::fprintf(stderr,
                 "warning: --kv-store %s holds %s, over --kv-store-limit %s: the rest is this run's own entries%s\n",
                 dir_.c_str(), text(eviction.bytes_after).c_str(), text(limit_bytes_).c_str(), in_use.c_str());
  }
  std::fflush(stdout);
}

}  // namespace pf::pipeline
