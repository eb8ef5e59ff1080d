// `pipefill profile`: every stage times its own layers on fresh prompts (SGLang's profile)
// and on chunks after prefixes (pipefill's), fits both cost models, scores both on held-out
// chunks, and rank 0 saves them with the configuration they belong to. Run under mpirun
// with the same pp x tp (and partition) as the runs that will reuse it.
#include <mpi.h>

#include <algorithm>
#include <cstdio>

#include "cli/backend_request.hpp"
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "cli/run_record.hpp"
#include "compute/backend_capabilities.hpp"
#include "dist/checked_step.hpp"
#include "errors.hpp"
#include "io/file_checks.hpp"
#include "pipeline/backend_setup.hpp"
#include "pipeline/chunk_planning.hpp"
#include "pipeline/rank_setup.hpp"
#include "sched/cost_profile.hpp"
#include "sched/dynamic_chunker.hpp"

namespace pf::cli {

int profile_command(int argc, char** argv) {
  ProfileOptions options;
  if (!parse_profile(argc, argv, options)) return 0;
  io::require_writable_file_path(options.out, "--out");  // before the minutes of profiling, not after
  // The model's own files are read, never written.
  io::require_no_file_of({{"--out", options.out}}, {"--model", options.placement.model});
  const auto& place = options.placement;
  if (!compute::supports(place.backend, compute::Product::kProfile))
    throw UserError(compute::refusal(place.backend, compute::Product::kProfile, "profile"));
  dist::Topology topo = dist::make_topology(place.pp, place.tp);
  pipeline::RankModel rank_model =
      pipeline::open_rank_model(topo, place.model, place.seed, place.layer_partition, place.expert_split);
  const int longest_profiled = options.chunk_size + sched::chunk_floor(options.chunk_size);  // 1.25 C0
  // --logprobs: the layers of runs that score every token of prompts as long as the range
  // profiled (what such a run given this profile will use).
  const int64_t prompt = options.max_prefix + options.chunk_size;
  pipeline::settle_partition(
      topo, rank_model,
      pipeline::run_partition(rank_model, topo.pp, {prompt}, {options.logprobs ? prompt : 0}, /*profiled=*/""));
  pipeline::check_forward_memory(place.backend, topo, rank_model, longest_profiled, options.logprobs, "");
  pipeline::BackendRequest request =
      backend_request(place, options.page_size, sched::longest_chunk(options.chunk_size, options.page_size));
  request.profile_room_tokens = options.max_prefix + longest_profiled;
  // The backend's KV rule checks that the pool holds a chunk of 1.25 C0 (the rest of the
  // prefix range is optional), collectively, before any weights are read.
  pipeline::StageBackend backend = pipeline::make_stage_backend(topo, rank_model, request, {longest_profiled});
  // Each stage profiles prefixes up to what its own pool holds: said when the smallest pool cuts
  // the asked range short (a run's chunks past it are priced by extrapolating the fit).
  long long capacity = backend.compute->capacity_tokens();
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &capacity, 1, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD));
  if (topo.is_writer() && capacity < request.profile_room_tokens)
    std::fprintf(stderr,
                 "warning: --max-prefix %lld: the smallest stage's KV pool holds %lld tokens, so its prefixes "
                 "are profiled up to %lld (raise %s for the whole range)\n",
                 static_cast<long long>(options.max_prefix), capacity,
                 std::max(0ll, capacity - static_cast<long long>(longest_profiled)),
                 place.backend == compute::BackendKind::kCuda ? "--kv-memory-fraction" : "--kv-memory-mb");

  const auto fits = pipeline::profile_stages(topo, *backend.compute, rank_model.shape.hidden_size, options.chunk_size,
                                             options.points, /*all_stages=*/true, /*fresh=*/true, /*prefixed=*/true,
                                             /*report_progress=*/true);
  dist::checked_step(MPI_COMM_WORLD, [&] {
    if (!topo.is_writer()) return;
    sched::CostProfile profile;
    profile.identity = placement_identity(place, topo, rank_model);
    profile.hardware = sched::describe_hardware();
    profile.initial_chunk = options.chunk_size;
    profile.stages = *fits;
    sched::save_cost_profile(options.out, profile);
    std::printf("%-5s %-7s %-3s %12s %12s %12s %12s %8s  %s\n", "stage", "form", "ok", "a", "b", "c", "gamma",
                "held-out", "points (fit / held out)");
    for (const auto& f : *fits)
      for (const auto* fit : {&f.sglang, &f.prefix}) {
        const bool sglang = fit == &f.sglang;
        const double error = sglang ? f.sglang_heldout_error : f.prefix_heldout_error;
        std::printf("%-5d %-7s %-3s %12.4e %12.4e %12.4e %12.4e %7.1f%%  %d / %d%s%s\n", f.stage,
                    sched::cost_form_name(fit->model.form), fit->ok ? "yes" : "no", fit->model.a, fit->model.b,
                    fit->model.c, fit->model.gamma, error < 0 ? 0.0 : 100 * error,
                    sglang ? f.fresh_points : f.prefixed_points, f.heldout_points, fit->ok ? "" : "  ",
                    fit->ok ? "" : fit->problem.c_str());
      }
    std::printf("wrote %s (held-out: mean relative error on prefixed chunks neither fit saw)\n", options.out.c_str());
    // What `run` and `plan` will do with it, said now, once per policy that cannot use it
    // (the same decision as theirs: sched::make_dynamic_policy on the policy's own fits).
    for (const auto& [kind, policy] : {std::pair{sched::ChunkPolicyKind::kPipefill, "--chunk-policy pipefill"},
                                       std::pair{sched::ChunkPolicyKind::kSglang, "--dynamic-chunking"}}) {
      std::string problem;
      sched::make_dynamic_policy(sched::policy_defaults(kind, options.chunk_size, options.page_size), *fits, problem);
      if (!problem.empty())
        std::fprintf(stderr, "warning: with this profile, %s falls back to fixed chunks (%s)\n", policy,
                     problem.c_str());
    }
  });
  dist::free_topology(topo);
  return 0;
}

}  // namespace pf::cli
