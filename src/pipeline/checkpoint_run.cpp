// Checkpoints inside a prompt (see checkpoint_run.hpp).
#include "pipeline/checkpoint_run.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "dist/collectives.hpp"
#include "dist/root_decision.hpp"
#include "dist/wait.hpp"
#include "errors.hpp"
#include "io/durable_file.hpp"
#include "io/fnv1a.hpp"
#include "kvcache/kv_source.hpp"
#include "model/layer_partition.hpp"
#include "pipeline/kv_export_setup.hpp"
#include "sched/context_split.hpp"

namespace pf::pipeline {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kManifestFormat = "pipefill-checkpoint-1";
constexpr int kPiece = 512;              // rows read from or handed to the KV pool at a time
constexpr double kFirstAutoCall_s = 60;  // auto: the first checkpoint, whose cost sets the interval
constexpr int kManifestsKept = 2;        // a torn newest one falls back to the one before
constexpr long long kCallAhead = 2;      // micro-batches between a periodic call and its cutoff

std::string manifest_name(long long sequence) {
  char name[64];
  std::snprintf(name, sizeof name, "checkpoint-%06lld.json", sequence);
  return name;
}

// The directory of a layout's files under OUTPUT.checkpoint ("pp2_tp1_layers15.15"): a run
// resumed onto another layout writes its own files beside the ones it restores from, which
// stay until no kept manifest names them.
std::string layout_dir_name(const dist::Topology& topo, const std::string& partition) {
  std::string layers = partition;
  std::replace(layers.begin(), layers.end(), ',', '.');
  return "pp" + std::to_string(topo.pp) + "_tp" + std::to_string(topo.tp) + "_layers" + layers;
}

// The manifests of `dir`, newest first.
std::vector<std::pair<long long, std::string>> manifests(const std::string& dir) {
  std::vector<std::pair<long long, std::string>> found;
  static const std::regex pattern("checkpoint-([0-9]{6,})\\.json");
  std::error_code error;
  for (const fs::directory_entry& item : fs::directory_iterator(dir, error)) {
    std::smatch match;
    const std::string name = item.path().filename().string();
    if (std::regex_match(name, match, pattern)) found.emplace_back(std::stoll(match[1]), item.path().string());
  }
  std::sort(found.rbegin(), found.rend());
  return found;
}

// A value's bits as an unsigned integer of its size, and back: the manifest keeps floats exactly.
template <class To, class From>
To same_bits(From value) {
  static_assert(sizeof(To) == sizeof(From), "same_bits: sizes differ");
  To out;
  std::memcpy(&out, &value, sizeof out);
  return out;
}
uint32_t float_bits(float v) {
  return same_bits<uint32_t>(v);
}
float bits_float(uint32_t bits) {
  return same_bits<float>(bits);
}
uint64_t double_bits(double v) {
  return same_bits<uint64_t>(v);
}
double bits_double(uint64_t bits) {
  return same_bits<double>(bits);
}

json digest_json(const io::TokenRowsDigest& d) {
  return {{"logprobs", d.logprobs.value},
          {"topk_ids", d.topk_ids.value},
          {"topk_logprobs", d.topk_logprobs.value},
          {"nll_sum_bits", double_bits(d.nll_sum)},
          {"set_logprobs", d.set_logprobs.value}};
}
io::TokenRowsDigest json_digest(const json& j) {
  io::TokenRowsDigest d;
  d.logprobs.value = j.at("logprobs").get<uint64_t>();
  d.topk_ids.value = j.at("topk_ids").get<uint64_t>();
  d.topk_logprobs.value = j.at("topk_logprobs").get<uint64_t>();
  d.nll_sum = bits_double(j.at("nll_sum_bits").get<uint64_t>());
  // (Checkpoints written before --token-ids have none: FNV's empty hash, as a run without a set.)
  if (j.contains("set_logprobs")) d.set_logprobs.value = j.at("set_logprobs").get<uint64_t>();
  return d;
}

}  // namespace

void require_checkpoint_directory(const std::string& dir) {
  std::error_code error;
  const fs::file_status status = fs::symlink_status(dir, error);
  if (!fs::exists(status)) return;
  if (!fs::is_directory(status))
    throw UserError(dir + " exists and is not a checkpoint directory (the run keeps its checkpoints there and " +
                    "removes it when the output is complete): move it aside");
  static const std::regex ours("checkpoint-[0-9]{6,}\\.json(\\.tmp)?|pp[0-9]+_tp[0-9]+_layers[0-9.]+");
  for (const fs::directory_entry& item : fs::directory_iterator(dir, error)) {
    const std::string name = item.path().filename().string();
    if (!std::regex_match(name, ours))
      throw UserError(dir + " holds " + name +
                      ", which no run's checkpoint does (the run removes the directory whole when the output is "
                      "complete): move it aside");
  }
  if (error) throw UserError("cannot read " + dir + ": " + error.message());
}

double young_daly_interval(double cost_s, double mtbf_s) {
  return std::sqrt(2.0 * std::max(cost_s, 1e-3) * mtbf_s);
}

// One rank's answer to one call.
struct CheckpointRun::Part {
  dist::CheckpointCall call;
  uint64_t ticket = 0;  // the writer's sync
  bool missed = false;  // the rank had passed the cutoff when the call came
  json scoring;         // the last stage's TP rank 0: its scoring state at the cutoff
};

// Rank 0: one call's answers so far.
struct CheckpointRun::Pending {
  dist::CheckpointCall call;
  std::map<int, json> answers;  // by world rank
  double called_s = 0;
};

CheckpointRun::CheckpointRun(const dist::Topology& topology, const RankModel& rank_model, CheckpointSettings settings,
                             const io::PromptSet& prompts, const std::vector<int64_t>& lengths,
                             const std::vector<char>& done, io::ResultWriter* results, const std::string& identity)
    : topo_(topology),
      model_(rank_model),
      settings_(std::move(settings)),
      lengths_(lengths),
      reports_(topology.control_comm),
      results_(results) {
  const ExportNames names = export_names(rank_model, prompts, lengths);
  // Float32 files whatever the pool: the rows come back exactly as they were computed.
  files_ = layout_dir_name(topo_, model::partition_text(rank_model.partition));
  layout_ = export_layout(rank_model, settings_.dir + "/" + files_, names.model_identity, topo_.stage, topo_.tp,
                          topo_.tp_rank, io::Dtype::kF32);
  if (topo_.is_writer()) identity_hash_ = io::Fnv1a().add(identity).hex();
  if (settings_.resume) restore(done, results);
  if (topo_.is_writer()) {  // numbered after every manifest there, restored or not; done prompts' files go
    const auto found = manifests(settings_.dir);
    if (!found.empty()) next_sequence_ = std::max(next_sequence_, found.front().first + 1);
    remove_files_of_completed_prompts();
  }
  // With CP the stage's files are CP rank 0's, written from the rows it gathers (the files of
  // a run without CP); the other CP ranks hand their rows over in the same collective reads.
  if (!cp_share_only())
    writer_ = std::make_unique<kv::KvExporter>(layout_, lengths_, names.token_hashes, kv::KvFileMode::kCheckpoint);
  // Restored by the layout that wrote it: its file continues in place. From another layout:
  // load_restored hands the rows to this layout's own file as it reads them.
  if (restored_ && restored_from_ == files_ && restored_source_->same_layout()) {
    handed_[restored_->prompt] = restored_->tokens;
    if (writer_) writer_->continue_file(restored_->prompt, restored_->tokens, restored_source_->checksum());
  }
  interval_s_ = settings_.interval_s < 0 ? kFirstAutoCall_s : settings_.interval_s;
  started_s_ = last_call_s_ = now();
}

CheckpointRun::~CheckpointRun() = default;

double CheckpointRun::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Rank 0 reads the manifests, newest first; each candidate is checked by every rank (its file's
// rows against the manifest's checksum) and by rank 0 (the token rows in the output); the
// first that passes everywhere is restored.
void CheckpointRun::restore(const std::vector<char>& done, io::ResultWriter* results) {
  const bool root = topo_.is_writer();
  std::vector<std::pair<long long, std::string>> candidates;
  if (root) candidates = manifests(settings_.dir);
  int count = static_cast<int>(candidates.size());
  dist::broadcast_int(count, 0, MPI_COMM_WORLD);
  for (int c = 0; c < count; ++c) {
    // Rank 0: the manifest, if it belongs to this run and its prompt is still to do.
    const std::string text = dist::decide_on_root(MPI_COMM_WORLD, [&]() -> std::string {
      try {
        std::ifstream in(candidates[c].second);
        const json m = json::parse(in);
        const int p = m.at("prompt").get<int>();
        const int64_t tokens = m.at("tokens").get<int64_t>();
        std::string why;
        if (m.at("format") != kManifestFormat)
          why = "another format";
        else if (m.at("identity") != identity_hash_)
          why = "another run (model, input or configuration)";
        else if (p < 0 || p >= static_cast<int>(lengths_.size()) || done[p])
          return "";  // that prompt is done
        else if (tokens <= 0 || tokens >= lengths_[p])
          why = "a position outside its prompt";
        else if (!std::regex_match(m.value("files", std::string()), std::regex("(pp[0-9]+_tp[0-9]+_layers[0-9.]+)?")))
          why = "a files directory of no layout";
        if (!why.empty()) {
          std::printf("note: %s is of %s: not used\n", candidates[c].second.c_str(), why.c_str());
          return "";
        }
        return m.dump();
      } catch (const std::exception& e) {
        std::printf("note: %s cannot be read (%s): not used\n", candidates[c].second.c_str(), e.what());
        return "";
      }
    });
    if (text.empty()) continue;
    const json m = json::parse(text);
    const int p = m.at("prompt").get<int>();
    const int64_t tokens = m.at("tokens").get<int64_t>();
    // Every rank: the rows [0, tokens) of its layers and heads, from whichever files of the
    // layout that wrote them hold them, against their checksums.
    const std::string files = m.value("files", std::string());
    kv::KvSourceFiles source{settings_.dir + "/" + files + "/" + kv::kv_prompt_dir_name(p),     p,      lengths_[p],
                             std::stoull(m.at("tokens_fnv1a").get<std::string>(), nullptr, 16), tokens, {}};
    for (const json& rank : m.at("ranks")) {
      const std::string path = kv::kv_file_name(p, rank.at("stage").get<int>(), rank.at("tp_rank").get<int>());
      source.row_checksums[fs::path(path).filename().string()] =
          std::stoull(rank.at("checksum").get<std::string>(), nullptr, 16);
    }
    std::string why;
    restored_source_ = kv::KvSource::open(layout_, source, &why);
    std::optional<std::string> problem;
    if (!restored_source_) problem = why;
    const dist::RootOnly<std::vector<std::string>> problems =
        dist::gather_on_root(MPI_COMM_WORLD, problem.value_or(""));
    // Rank 0: the token rows, last (reading them opens the prompt in the output).
    bool rows_finite = true;
    const std::string verdict = dist::decide_on_root(MPI_COMM_WORLD, [&]() -> std::string {
      for (const std::string& why : *problems)
        if (!why.empty()) {
          std::printf("note: %s not used: %s\n", candidates[c].second.c_str(), why.c_str());
          return "";
        }
      if (m.contains("token_rows")) {
        const std::optional<io::ResultWriter::ContinuedRows> rows =
            results->continue_prompt(p, tokens, json_digest(m.at("token_rows")));
        if (!rows) {
          std::printf("note: %s not used: the token rows of prompt %d in the partial output do not match it\n",
                      candidates[c].second.c_str(), p);
          return "";
        }
        rows_finite = rows->finite;
      }
      if (!settings_.quiet)
        std::printf("resuming prompt %d at token %lld of %lld from %s\n", p, static_cast<long long>(tokens),
                    static_cast<long long>(lengths_[p]), candidates[c].second.c_str());
      return "ok";
    });
    if (verdict.empty()) continue;
    RestoredPrompt r;
    r.prompt = p;
    r.tokens = tokens;
    if (m.contains("next_logprob_bits")) r.next_logprob = bits_float(m.at("next_logprob_bits").get<uint32_t>());
    if (m.contains("hidden_sum_bits"))
      for (const json& bits : m.at("hidden_sum_bits")) r.hidden_sum.push_back(bits_double(bits.get<uint64_t>()));
    if (root) {
      r.rows_finite = rows_finite;
      results->keep_partial();
    }
    restored_ = std::move(r);
    restored_from_ = files;
    return;
  }
  restored_source_.reset();
}

void CheckpointRun::start(const sched::BatchPlan& plan, compute::StageCompute& compute, const TokenScorer* scorer,
                          const HiddenStateRows* hidden_rows) {
  plan_ = &plan;
  plan_position_.assign(lengths_.size(), -1);
  for (const sched::MicroBatch& mb : plan.micro_batches)
    if (mb.is_first) plan_position_[mb.prompt] = mb.index;
  compute_ = &compute;
  scorer_ = scorer;
  hidden_rows_ = hidden_rows;
}

void CheckpointRun::load_restored(int prompt) {
  if (!restored_ || restored_->prompt != prompt) throw std::logic_error("load_restored: not the restored prompt");
  const size_t rows = static_cast<size_t>(layout_.layers) * layout_.kv_heads * layout_.head_dim;
  std::vector<float> keys, values;
  const int piece = sched::cp_load_piece(kPiece, topo_.cp);  // (with CP each rank keeps its share of a piece)
  for (int64_t at = 0; at < restored_->tokens; at += piece) {
    const int count = static_cast<int>(std::min<int64_t>(piece, restored_->tokens - at));
    keys.resize(rows * count);
    values.resize(layout_.latent ? 0 : rows * count);
    restored_source_->read(at, count, keys.data(), values.data());
    compute_->write_kv(prompt, at, count, keys.data(), values.data());
    if (at + count > handed(prompt)) feed(prompt, at, count, keys, values, false);  // another layout's rows
  }
  restored_source_.reset();
}

int64_t CheckpointRun::handed(int prompt) const {
  const auto found = handed_.find(prompt);
  return found == handed_.end() ? 0 : found->second;
}

void CheckpointRun::feed(int prompt, int64_t start, int count, std::vector<float> keys, std::vector<float> values,
                         bool last) {
  if (start + count <= handed(prompt)) return;  // the writer has them (a restored prefix)
  if (writer_) writer_->add_chunk(prompt, start, count, std::move(keys), std::move(values), last);
  handed_[prompt] = start + count;
  if (last) handed_.erase(prompt);
}

std::optional<dist::CheckpointCall> CheckpointRun::due(long long i) {
  if (!enabled_ || settings_.interval_s == 0 || now() - last_call_s_ < interval_s_) return {};
  // A few micro-batches ahead: the call then reaches every rank before that micro-batch does
  // (MPI orders the notices, not the notices against the chunks, which travel on another
  // communicator or over NCCL). The first boundary there with a prompt in flight.
  const long long count = static_cast<long long>(plan_->micro_batches.size());
  for (long long c = i + kCallAhead; c < count; ++c)
    if (!plan_->micro_batches[c].is_first) return call_at(c);
  return {};
}

std::optional<dist::CheckpointCall> CheckpointRun::final_call(long long cutoff) {
  if (cutoff >= static_cast<long long>(plan_->micro_batches.size()) || cutoff == last_called_cutoff_) return {};
  if (plan_->micro_batches[cutoff].is_first) return {};  // no prompt in flight: the output holds every prompt before
  return call_at(cutoff);
}

dist::CheckpointCall CheckpointRun::call_at(long long cutoff) {
  const sched::MicroBatch& mb = plan_->micro_batches[cutoff];
  last_called_cutoff_ = cutoff;
  last_call_s_ = now();
  dist::CheckpointCall call{next_sequence_++, cutoff, mb.prompt, mb.start};
  auto pending = std::make_unique<Pending>();
  pending->call = call;
  pending->called_s = last_call_s_;
  pending_[call.sequence] = std::move(pending);
  last_sequence_ = call.sequence;
  return call;
}

void CheckpointRun::accept(const dist::CheckpointCall& call) {
  if (!answered_.count(call.sequence)) accepted_.push_back(call);
}

// The calls whose cutoff is i or before, taken from accepted_, each with whether this rank
// passed its cutoff. With CP the stage's CP group acts on CP rank 0's list: the rows are read
// collectively, so every rank of the group must read for the same calls, and a notice may
// reach one rank before its cutoff and another after.
std::vector<std::pair<dist::CheckpointCall, bool>> CheckpointRun::calls_reached(long long i) {
  std::vector<std::pair<dist::CheckpointCall, bool>> reached;
  for (auto it = accepted_.begin(); it != accepted_.end();) {
    if (it->cutoff > i) {
      ++it;
      continue;
    }
    reached.emplace_back(*it, it->cutoff < i);
    it = accepted_.erase(it);
  }
  if (topo_.cp == 1) return reached;
  std::vector<long long> list;  // (sequence, cutoff, prompt, tokens, missed) a call
  for (const auto& [call, missed] : reached)
    list.insert(list.end(), {call.sequence, call.cutoff, call.prompt, call.tokens, missed ? 1LL : 0LL});
  dist::broadcast_vector(list, topo_.cp_comm);
  if (topo_.cp_rank == 0) return reached;
  // The others answer these calls as CP rank 0 does, and forget them (they may arrive later).
  for (const auto& [call, missed] : reached) accepted_.push_back(call);  // (not CP rank 0's: not answered yet)
  reached.clear();
  for (size_t k = 0; k + 5 <= list.size(); k += 5) {
    const dist::CheckpointCall call{list[k], list[k + 1], list[k + 2], list[k + 3]};
    reached.emplace_back(call, list[k + 4] != 0);
    answered_.insert(call.sequence);
  }
  accepted_.erase(std::remove_if(accepted_.begin(), accepted_.end(),
                                 [&](const dist::CheckpointCall& c) { return answered_.count(c.sequence) > 0; }),
                  accepted_.end());
  return reached;
}

void CheckpointRun::reach(long long i) {
  for (const auto& [call, missed] : calls_reached(i)) {
    auto part = std::make_unique<Part>();
    part->call = call;
    part->missed = missed;
    if (!part->missed) {
      const int prompt = static_cast<int>(call.prompt);
      // Without --checkpoint-every the rows are handed over now, from where the writer stands.
      std::vector<float> keys, values;
      const size_t rows = static_cast<size_t>(layout_.layers) * layout_.kv_heads * layout_.head_dim;
      for (int64_t at = handed(prompt); at < call.tokens; at += kPiece) {
        const int count = static_cast<int>(std::min<int64_t>(kPiece, call.tokens - at));
        keys.assign(rows * count, 0.0f);
        values.assign(layout_.latent ? 0 : rows * count, 0.0f);
        compute_->read_kv(prompt, at, count, keys.data(), values.data());
        feed(prompt, at, count, std::move(keys), std::move(values), false);
      }
      if (writer_) part->ticket = writer_->request_sync();
      if (topo_.world_rank == topo_.last_stage_leader()) {
        if (scorer_) part->scoring["next_logprob_bits"] = float_bits(scorer_->carried());
        if (hidden_rows_) {
          json sum = json::array();
          for (double v : hidden_rows_->running_sum()) sum.push_back(double_bits(v));
          if (!sum.empty()) part->scoring["hidden_sum_bits"] = std::move(sum);
        }
      }
    }
    syncing_.push_back(part.get());
    parts_.push_back(std::move(part));
  }
  poll();
}

// One rank's answer, as text: the sync's state of the prompt's file, or why there is none.
void CheckpointRun::report(const Part& part, const kv::KvSyncResult* synced) {
  json answer = {{"sequence", part.call.sequence}, {"stage", topo_.stage}, {"tp_rank", topo_.tp_rank}};
  if (!synced && part.missed) {
    answer["missed"] = true;  // it had passed the cutoff when the call came, or never reached it
  } else if (!synced) {
    answer["cp_share"] = true;  // a CP rank other than 0: its rows are in CP rank 0's file
  } else {
    answer["seconds"] = synced->seconds;
    if (synced->error) answer["error"] = *synced->error;
    for (const kv::KvFileState& file : synced->files)
      if (file.prompt == part.call.prompt) {
        if (file.rows != part.call.tokens)
          answer["error"] =
              "its file holds " + std::to_string(file.rows) + " rows, not " + std::to_string(part.call.tokens);
        answer["checksum"] = io::Fnv1a{file.checksum}.hex();
        answer["bytes"] = static_cast<double>(file.rows) * layout_.layers * layout_.kv_heads * layout_.head_dim *
                          (layout_.latent ? 1 : 2) * sizeof(float);
      }
    if (!answer.contains("checksum") && !answer.contains("error")) answer["error"] = "no file of the prompt is open";
    if (!part.scoring.is_null()) answer.update(part.scoring);
  }
  if (topo_.is_writer())
    take_report(0, answer.dump());
  else
    reports_.send(answer.dump());
}

void CheckpointRun::poll() {
  // Syncs finish in the order they were asked for (one writer, one queue).
  while (!syncing_.empty()) {
    const Part& part = *syncing_.front();
    if (part.missed || !writer_) {
      report(part, nullptr);
    } else {
      const std::optional<kv::KvSyncResult> synced = writer_->sync_result(part.ticket);
      if (!synced) break;
      report(part, &*synced);
    }
    syncing_.erase(syncing_.begin());
  }
  if (!topo_.is_writer()) return;
  for (auto& [rank, text] : reports_.arrived()) take_report(rank, text);
  write_if_complete();
}

void CheckpointRun::take_report(int rank, const std::string& text) {
  json answer = json::parse(text);
  const auto found = pending_.find(answer.at("sequence").get<long long>());
  if (found != pending_.end()) found->second->answers[rank] = std::move(answer);
}

// Rank 0: a call every rank answered, and whose token rows the output holds up to its cutoff,
// becomes a manifest. A call some rank missed (it had passed the cutoff when the call came,
// or the run ended before it) is dropped; a part that failed to write is a warning, and no
// more checkpoints are called.
void CheckpointRun::write_if_complete() {
  while (!pending_.empty()) {
    Pending& pending = *pending_.begin()->second;
    const dist::CheckpointCall& call = pending.call;
    if (static_cast<int>(pending.answers.size()) < topo_.world_size) return;
    bool missed = false;
    for (const auto& [rank, answer] : pending.answers) missed = missed || answer.contains("missed");
    if (missed) {
      pending_.erase(pending_.begin());
      continue;
    }
    if (!enabled_) {
      pending_.erase(pending_.begin());
      continue;
    }
    std::string failure;
    for (const auto& [rank, answer] : pending.answers)
      if (answer.contains("error")) {
        failure = "rank " + std::to_string(rank) + ": " + answer.at("error").get<std::string>();
        break;
      }
    if (failure.empty() && results_->layout().token_rows() &&
        !results_->digest_at(static_cast<int>(call.prompt), call.tokens)) {
      // The token rows up to the cutoff are still on their way, unless the output has moved
      // on to a later prompt (the prompt finished, or its rows were not finite): then the
      // checkpoint is of no use and is dropped.
      const int prompt = static_cast<int>(call.prompt), open = results_->open_prompt();
      if (open == prompt && results_->open_rows() >= call.tokens) {
        failure = "the output's token rows did not stop at that position";
      } else if (open >= 0 && open != prompt && plan_position_.at(open) > plan_position_.at(prompt)) {
        pending_.erase(pending_.begin());
        continue;
      } else {
        return;
      }
    }
    if (failure.empty()) {
      try {
        write_manifest(pending);
      } catch (const std::exception& e) {
        failure = e.what();
      }
    }
    // Calls already in flight when the first one failed get no manifest and no warning of
    // their own: one warning says the run goes on without checkpoints, and then it does.
    if (!failure.empty() && enabled_)
      std::fprintf(stderr,
                   "warning: the checkpoint of prompt %lld at token %lld was not written (%s); the run goes on "
                   "without checkpoints\n",
                   call.prompt, call.tokens, failure.c_str());
    if (!failure.empty()) enabled_ = false;
    pending_.erase(pending_.begin());
  }
}

void CheckpointRun::write_manifest(const Pending& pending) {
  const dist::CheckpointCall& call = pending.call;
  const int prompt = static_cast<int>(call.prompt);
  const double written_s = now();
  results_->flush();  // the token rows [0, tokens) are in the file before the manifest names them
  json ranks = json::array();
  double slowest_sync = 0, bytes = 0;
  json m = {{"format", kManifestFormat}, {"identity", identity_hash_},
            {"sequence", call.sequence}, {"prompt", prompt},
            {"tokens", call.tokens},     {"prompt_length", lengths_.at(prompt)},
            {"files", files_},           {"tokens_fnv1a", kv::tokens_hash_text(writer_->tokens_hash(prompt))}};
  for (const auto& [rank, answer] : pending.answers) {
    if (answer.contains("cp_share")) continue;
    ranks.push_back(
        {{"stage", answer.at("stage")}, {"tp_rank", answer.at("tp_rank")}, {"checksum", answer.at("checksum")}});
    slowest_sync = std::max(slowest_sync, answer.at("seconds").get<double>());
    bytes += answer.value("bytes", 0.0);
    for (const char* key : {"next_logprob_bits", "hidden_sum_bits"})
      if (answer.contains(key)) m[key] = answer.at(key);
  }
  m["ranks"] = std::move(ranks);
  if (const std::optional<io::TokenRowsDigest> digest = results_->digest_at(prompt, call.tokens))
    m["token_rows"] = digest_json(*digest);
  std::error_code error;
  fs::create_directories(settings_.dir, error);
  io::write_atomically(settings_.dir + "/" + manifest_name(call.sequence), m.dump(1));
  results_->keep_partial();
  last_written_ = {prompt, call.tokens};
  // Older manifests go, then the files of prompts the output holds (their writers closed them).
  const auto written = manifests(settings_.dir);
  for (size_t k = kManifestsKept; k < written.size(); ++k) fs::remove(written[k].second, error);
  remove_files_of_completed_prompts();
  // What a checkpoint costs the run: the slowest rank's fdatasync (the rows were written
  // beside the compute) and this manifest.
  const double cost = slowest_sync + (now() - written_s);
  if (settings_.interval_s < 0 && !interval_measured_) {
    interval_measured_ = true;
    interval_s_ = young_daly_interval(cost, settings_.mtbf_s);
    if (!settings_.quiet)
      std::printf("checkpoints: every %.0f s (Young/Daly: sqrt(2 x %.3f s a checkpoint x MTBF %.0f s))\n", interval_s_,
                  cost, settings_.mtbf_s);
  }
  if (!settings_.quiet)
    std::printf("checkpoint %lld: prompt %d at token %lld of %lld (%.1f MB of KV on %d rank(s), synced in %.2f s)\n",
                call.sequence, prompt, call.tokens, static_cast<long long>(lengths_.at(prompt)), bytes / 1e6,
                topo_.world_size, slowest_sync);
  std::fflush(stdout);
}

// Rank 0: the files of prompts the output holds go, and those of layouts no kept manifest names
// (a run resumed onto another layout, once it has checkpointed in its own).
void CheckpointRun::remove_files_of_completed_prompts() {
  std::error_code error;
  std::set<std::string> named = {files_};
  for (const auto& [sequence, path] : manifests(settings_.dir)) {
    std::ifstream in(path);
    const json m = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (m.is_object()) named.insert(m.value("files", std::string()));
  }
  const std::vector<char>& completed = results_->completed();
  for (const fs::directory_entry& item : fs::directory_iterator(settings_.dir, error)) {
    const std::string name = item.path().filename().string();
    if (!item.is_directory(error) || name.rfind("pp", 0) != 0) continue;
    if (named.count(name) == 0) {
      fs::remove_all(item.path(), error);
      continue;
    }
    for (size_t p = 0; p < completed.size(); ++p)
      if (completed[p]) fs::remove_all(item.path() / kv::kv_prompt_dir_name(static_cast<int>(p)), error);
  }
}

void CheckpointRun::finish() {
  for (const dist::CheckpointCall& call : accepted_) {  // a cutoff this rank never reached (not expected)
    auto part = std::make_unique<Part>();
    part->call = call;
    part->missed = true;
    syncing_.push_back(part.get());
    parts_.push_back(std::move(part));
  }
  accepted_.clear();
  dist::WaitLabel label("finishing the checkpoint of the prompt in flight (waiting for the other ranks' parts)");
  dist::wait_until([&] {
    poll();
    return syncing_.empty() && (!topo_.is_writer() || pending_.empty());
  });
  if (writer_) writer_->finish();
}

void CheckpointRun::remove_directory() {
  if (writer_) writer_->finish();
  std::error_code error;
  fs::remove_all(settings_.dir, error);
}

}  // namespace pf::pipeline
