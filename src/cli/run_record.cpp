// Identities and output attributes (see run_record.hpp).
#include "cli/run_record.hpp"

#include "compute/backend_capabilities.hpp"
#include "io/fnv1a.hpp"
#include "model/layer_partition.hpp"

namespace pf::cli {

nlohmann::json run_identity(const RunOptions& options, const pipeline::RankModel& m, const io::PromptSet& prompts) {
  nlohmann::json identity = run_identity_options(options);
  // Not options: what the model, the partition and the input turned out to be.
  identity["model_config"] = m.config_json;
  identity["weights_fingerprint"] = m.weights_fingerprint;
  identity["input_fingerprint"] = std::to_string(io::fingerprint(prompts));
  identity["num_prompts"] = prompts.num_prompts();
  // The token set's contents, not its file's name: another set is another output.
  if (!options.token_set.empty())
    identity["token_set"] = {
        {"count", options.token_set.size()},
        {"fnv1a", io::Fnv1a().add(options.token_set.data(), sizeof(int32_t) * options.token_set.size()).hex()}};
  // A resumed MoE output keeps one split: the provenance it records is then true of every row.
  if (m.shape.moe()) identity["expert_split"] = model::expert_split_name(options.placement.expert_split);
  return identity;
}

nlohmann::json placement_identity(const PlacementOptions& options, const dist::Topology& topology,
                                  const pipeline::RankModel& rank_model) {
  nlohmann::json identity = pipeline::placed_model_identity(topology, rank_model);
  identity.update(placement_identity_options(options));
  // Whole or sliced experts cost differently; a dense model's profile is the same either way.
  if (rank_model.shape.moe()) identity["expert_split"] = model::expert_split_name(options.expert_split);
  return identity;
}

nlohmann::json output_attributes(const RunOptions& options, const pipeline::RankModel& m,
                                 const pipeline::PlanDecision& decision, const std::string& backend_used,
                                 double wall_s) {
  nlohmann::json attributes = to_json(options);
  attributes["version"] = PIPEFILL_VERSION;
  attributes["model_config"] = m.config_json.dump();
  attributes["layer_partition_used"] = model::partition_text(m.partition);
  attributes["chunk_policy_used"] = decision.policy_used;
  attributes["chunk_policy_note"] = decision.note;
  attributes["backend_used"] = backend_used;
  if (!compute::supports(options.placement.backend, compute::Product::kLogits))
    attributes["logits"] = "not computed: emulate backend (compute replaced by cost-model sleeps)";
  attributes["wall_s"] = wall_s;
  return attributes;
}

}  // namespace pf::cli
