// Rank 0's checks and reads before a run (see run_inputs.hpp).
#include "cli/run_inputs.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "cli/run_record.hpp"
#include "compute/backend_capabilities.hpp"
#include "errors.hpp"
#include "io/file_checks.hpp"
#include "io/token_ids_file.hpp"
#include "kvcache/kv_directories.hpp"
#include "pipeline/backend_setup.hpp"
#include "pipeline/checkpoint_run.hpp"
#include "sched/dynamic_chunker.hpp"

namespace pf::cli {

void check_run_paths(const RunOptions& o) {
  const bool cost_file = o.chunking.cost_source.profile_file();
  const std::string& cost_path = o.chunking.cost_source.value;
  io::require_writable_file_path(o.output, "--output");
  io::require_writable_file_path(o.output + ".partial", "the output's partial file");
  if (!o.trace.empty()) io::require_writable_file_path(o.trace, "--trace");
  if (!o.save_kv.empty()) io::require_writable_directory(o.save_kv, "--save-kv");
  if (!o.kv_store.empty()) io::require_writable_directory(o.kv_store, "--kv-store");
  if (cost_file) io::require_regular_file(cost_path, "--cost-model");
  // The checkpoints of a stop or --checkpoint-every go to OUTPUT.checkpoint (removed whole
  // once the output is complete): no export may be that directory, lie inside it or hold it.
  const std::string checkpoints = o.output + ".checkpoint";
  const std::vector<io::PathRole> files = {{"--input", o.input},
                                           {"--token-ids", o.token_ids},
                                           {"--output", o.output},
                                           {"the output's partial file", o.output + ".partial"},
                                           {"the output's checkpoint directory", checkpoints},
                                           {"--trace", o.trace},
                                           {"--cost-model", cost_file ? cost_path : ""}};
  std::vector<io::PathRole> all = files;
  all.push_back({"--save-kv", o.save_kv});
  all.push_back({"--kv-store", o.kv_store});
  io::require_distinct_paths(all);
  // The exports name their own files in their directories (index.json, prompt-*/...): none of
  // the run's other files may be there, nor one export inside the other.
  io::require_outside_directory(files, {"--save-kv", o.save_kv});
  io::require_outside_directory(files, {"--kv-store", o.kv_store});
  io::require_outside_directory({{"--save-kv", o.save_kv}}, {"--kv-store", o.kv_store});
  io::require_outside_directory({{"--kv-store", o.kv_store}}, {"--save-kv", o.save_kv});
  // Nor anything the run reads (removed with it), and the directory holds only checkpoints.
  std::error_code not_directory;
  const bool model_dir = std::filesystem::is_directory(o.placement.model, not_directory);
  io::require_outside_directory({{"--save-kv", o.save_kv},
                                 {"--kv-store", o.kv_store},
                                 {"--input", o.input},
                                 {"--token-ids", o.token_ids},
                                 {"--trace", o.trace},
                                 {"--cost-model", cost_file ? cost_path : ""},
                                 {"--model", model_dir ? o.placement.model : ""}},
                                {"the output's checkpoint directory", checkpoints});
  pipeline::require_checkpoint_directory(checkpoints);
  // What the KV directories already hold: each its own writer's files.
  if (!o.save_kv.empty()) kv::require_save_kv_directory(o.save_kv, /*replace_export=*/o.overwrite || o.resume);
  if (!o.kv_store.empty()) kv::require_kv_store_directory(o.kv_store);
  // The model's own files are read, never written: no output lands on one.
  io::require_no_file_of(
      {{"--output", o.output}, {"the output's partial file", o.output + ".partial"}, {"--trace", o.trace}},
      {"--model", o.placement.model});
  // An earlier run's output can stand for hours of compute: replaced only when asked. So can
  // whatever file --trace names.
  std::error_code missing;
  if (!o.resume && !o.overwrite && std::filesystem::exists(o.output, missing))
    throw UserError("--output " + o.output +
                    " already exists (an earlier run's output?); add --overwrite to compute it again and replace it, "
                    "or --resume to keep the prompts it holds");
  if (!o.trace.empty() && !o.resume && !o.overwrite && std::filesystem::exists(o.trace, missing))
    throw UserError("--trace " + o.trace + " already exists; add --overwrite to replace it (and the output)");
}

std::vector<int32_t> read_token_set(const RunOptions& options, const pipeline::RankModel& rank_model) {
  if (options.token_ids.empty()) return {};
  std::vector<int32_t> token_set = io::read_token_ids(options.token_ids);
  io::check_token_set(token_set, rank_model.shape.vocab_size, options.token_ids);
  check_token_rows_fit(options, static_cast<int>(token_set.size()));
  return token_set;
}

io::PromptSet read_run_prompts(const RunOptions& o, const pipeline::RankModel& m) {
  io::PromptSet prompts = io::read_prompts_isolated(o.input, m.shape.vocab_size, o.watchdog_timeout_s);
  io::check_prompt_lengths(prompts, m.shape.max_position_embeddings, o.allow_long_prompts);
  return prompts;
}

void check_kv_capacity(const RunOptions& o, const dist::Topology& topo, const pipeline::RankModel& m,
                       const io::PromptSet& prompts) {
  pipeline::check_kv_capacity(o.placement.backend, o.placement.dtype, topo, m, o.chunking.page_size,
                              o.placement.kv_memory_mb, prompts.lengths(), sched::shortest_chunk(o.chunking));
}

void check_forward_memory(const RunOptions& o, const dist::Topology& topo, const pipeline::RankModel& m,
                          const std::vector<int64_t>& lengths, bool profiles) {
  int64_t longest = 0;
  for (int64_t length : lengths) longest = std::max(longest, length);
  // Fixed chunks are at most C0, dynamic ones (sched::longest_chunk) a little more; neither is
  // longer than its prompt.
  const int64_t chunk = o.chunking.dynamic() ? sched::longest_chunk(o.chunking.initial_chunk, o.chunking.page_size)
                                             : o.chunking.initial_chunk;
  int64_t tokens = std::min(chunk, longest);
  std::string hint;
  if (profiles) {  // dynamic chunking's own profile times forwards up to 1.25 C0, whatever the prompts
    const int64_t profiled = o.chunking.initial_chunk + sched::chunk_floor(o.chunking.initial_chunk);
    if (profiled > tokens)
      hint =
          " (dynamic chunking profiles forwards of 1.25 x --chunk-size, longer than the prompts: a saved "
          "--cost-model skips that)";
    tokens = std::max(tokens, profiled);
  }
  tokens = (tokens + topo.cp - 1) / topo.cp;  // a CP rank's share
  pipeline::check_forward_memory(o.placement.backend, topo, m, tokens, o.token_rows_wanted(), hint);
}

std::vector<int64_t> scored_positions(const RunOptions& o, const io::PromptSet& prompts) {
  std::vector<int64_t> scored(static_cast<size_t>(prompts.num_prompts()), 0);
  if (!o.token_rows_wanted()) return scored;
  const std::vector<int64_t> lengths = prompts.lengths();
  for (int p = 0; p < prompts.num_prompts(); ++p) scored[p] = lengths[p] - prompts.first_scored_row(p);
  return scored;
}

std::optional<sched::CostProfile> load_saved_costs(const RunOptions& o) {
  const sched::CostSource& source = o.chunking.cost_source;
  if (!source.profile_file()) return std::nullopt;
  return sched::load_cost_profile(source.value);
}

void match_saved_costs(const RunOptions& o, const sched::CostProfile& profile,
                       const nlohmann::json& placement_identity) {
  if (o.placement.backend != compute::BackendKind::kEmulate)
    sched::check_profile_matches(profile, placement_identity, o.chunking.cost_source.value);
}

std::unique_ptr<io::ResultWriter> open_output(const RunOptions& o, const pipeline::RankModel& m,
                                              const io::PromptSet& prompts) {
  const bool with_hidden = o.hidden_states != compute::HiddenStatesKind::kNone;
  if (o.top_k > m.shape.vocab_size)
    throw UserError("--top-k " + std::to_string(o.top_k) + " is more than the model's vocabulary (" +
                    std::to_string(m.shape.vocab_size) + " tokens)");
  io::OutputLayout layout;
  layout.num_prompts = prompts.num_prompts();
  layout.vocab_size = m.shape.vocab_size;
  layout.with_logits = compute::supports(o.placement.backend, compute::Product::kLogits);
  layout.hidden_size = with_hidden ? m.shape.hidden_size : 0;
  layout.token_logprobs = o.logprobs;
  layout.top_k = o.top_k;
  layout.token_set = o.token_set;
  if (layout.token_rows()) {
    layout.prompt_offsets = prompts.offsets;
    layout.score_start = prompts.score_start;
    layout.tokens = &prompts.tokens;  // the run's own PromptSet: it outlives the writer
  }
  layout.ids = prompts.ids;
  const nlohmann::json identity = run_identity(o, m, prompts);
  // --resume continues OUTPUT.partial where there is one, even beside a complete OUTPUT: that
  // partial is a later run's (an --overwrite stopped), which replaces OUTPUT when it completes.
  std::error_code no_partial;
  const bool partial = std::filesystem::file_size(o.output + ".partial", no_partial) > 0 && !no_partial;
  if (o.resume && !partial && io::verified_complete_output(o.output, layout, identity, o.watchdog_timeout_s))
    return nullptr;
  auto results = std::make_unique<io::ResultWriter>(o.output, layout, identity, o.resume, o.watchdog_timeout_s);
  if (!results->stale_rows().empty())
    std::fprintf(stderr,
                 "note: %s.partial was begun by an earlier pipefill, before outputs held /is_greedy: its %zu "
                 "finished prompt(s) are computed again\n",
                 o.output.c_str(), results->stale_rows().size());
  for (int prompt : results->torn_rows())
    if (std::find(results->stale_rows().begin(), results->stale_rows().end(), prompt) == results->stale_rows().end())
      std::fprintf(stderr,
                   "warning: prompt %d in %s.partial failed its checksum (a write torn by a crash): "
                   "computing it again\n",
                   prompt, o.output.c_str());
  return results;
}

}  // namespace pf::cli
