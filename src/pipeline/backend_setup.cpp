// Backend construction (see backend_setup.hpp).
#include "pipeline/backend_setup.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <stdexcept>

#include "compute/backend_capabilities.hpp"
#include "compute/cpu/cpu_backend.hpp"
#include "compute/decoder_layer.hpp"
#include "compute/emulate/emulated_backend.hpp"
#include "dist/checked_step.hpp"
#include "errors.hpp"
#ifdef PIPEFILL_HAVE_CUDA
#include "compute/cuda/cuda_backend.hpp"
#endif

namespace pf::pipeline {
namespace {

// What a rank's KV pool must hold of each prompt: all of it, or with CP its share, and one
// page more: a prompt that takes over another's prefix copies its partly filled last page
// while the prompt's other heirs still hold the original.
std::vector<int64_t> kv_demand_tokens(const std::vector<int64_t>& lengths, int cp_chunk, int cp, int page_size) {
  std::vector<int64_t> tokens = sched::cp_shard_lengths(lengths, cp_chunk, cp);
  if (cp > 1)
    for (int64_t& t : tokens) t += page_size;
  return tokens;
}

}  // namespace

std::vector<sim::StageCost> stage_costs_for(const sched::CostSource& source, const dist::Topology& topo,
                                            const RankModel& m, std::string& description, sched::CpAttention cp_mode) {
  if (source.analytic()) {
    const sim::HardwareSpec hw = sim::load_hardware(source.value);
    description = source.flag_text() + " (" + hw.name + (m.shape.fp8 ? ", fp8 matmuls" : ", bf16") + ")";
    // With CP each rank sleeps its share of a chunk and the ring's modelled steps (the
    // simulator's model: sim/context_parallel.hpp).
    return sim::analytic_stage_costs(m.shape, hw, m.partition, topo.tp, m.shape.fp8, dist::kActivationWireBytes,
                                     {topo.cp, cp_mode});
  }
  if (topo.cp > 1)
    throw UserError("--cp with --backend emulate models its costs from analytic:HARDWARE; a profile (" + source.value +
                    ") was measured without context parallelism");
  const sched::CostProfile profile = sched::load_cost_profile(source.value);
  // Not the backend: the profile was measured on the backend being emulated. Its model_config
  // is the one that run normalised, and this one config.json as written (keys differ): the
  // same model when every cost is the same.
  nlohmann::json identity = placed_model_identity(topo, m);
  const auto profiled = profile.identity.find("model_config");
  if (profiled != profile.identity.end() && profiled->is_object() &&
      model::same_costs(model::shape_from_json(*profiled, source.value), m.shape))
    identity["model_config"] = *profiled;
  sched::check_profile_matches(profile, identity, source.value);
  description = "profile " + source.value;
  return sim::profiled_stage_costs(profile, topo.pp);
}

StageBackend make_stage_backend(const dist::Topology& topo, const RankModel& m, const BackendRequest& request,
                                const std::vector<int64_t>& lengths) {
  // What the backend cannot do for this model: an error on every rank before any weight is read.
  dist::checked_step(MPI_COMM_WORLD, [&] {
    const std::string why = compute::refusal_for_model(request.backend, request.cpu_dtype == io::Dtype::kBF16, m.shape);
    if (!why.empty()) throw UserError(why);
  });
  const compute::KvDemand demand{kv_demand_tokens(lengths, request.cp_chunk, topo.cp, request.page_size),
                                 request.profile_room_tokens, lengths};
  std::vector<model::BlockDigest> digests;  // kept from the loaded weights, which the backend consumes
  const compute::WeightsLoader load_weights = [&](const model::LayerSink& take_layer) {
    model::StageWeights weights = load_rank_weights(topo, m, take_layer);
    digests = std::move(weights.record.digests);
    return weights;
  };
  const auto with_digests = [&](StageBackend backend) {
    backend.weights_digests = std::move(digests);
    return backend;
  };
  switch (request.backend) {
    case compute::BackendKind::kCpu:
      return with_digests(compute::make_cpu_backend(
          topo, m.config(), m.shard, m.kv_shape(topo.stage, request.page_size, io::dtype_size(request.cpu_dtype)),
          request.kv_memory_mb, request.cpu_threads, demand, load_weights, request.cp_attention));
    case compute::BackendKind::kEmulate: {
      std::vector<sim::StageCost> costs;
      std::string description;
      dist::checked_step(MPI_COMM_WORLD, [&] {
        costs = stage_costs_for(request.cost_source, topo, m, description, request.cp_attention);
      });
      return compute::make_emulated_backend(topo, costs[topo.stage], m.shard.vocab_count, request.profile_room_tokens,
                                            description);
    }
    case compute::BackendKind::kCuda:
#ifdef PIPEFILL_HAVE_CUDA
      return with_digests(cuda::make_cuda_backend(topo, m.config(), m.shard,
                                                  {request.transport, request.page_size, request.kv_memory_fraction,
                                                   request.max_chunk_tokens, request.cp_attention},
                                                  demand, load_weights));
#else
      break;  // options.cpp offers --backend cuda only in builds that have it
#endif
  }
  throw std::logic_error(std::string("no ") + compute::backend_name(request.backend) + " backend in this build");
}

void check_kv_capacity(compute::BackendKind backend, io::Dtype cpu_dtype, const dist::Topology& topo,
                       const RankModel& m, int page_size, int64_t kv_memory_mb, const std::vector<int64_t>& lengths,
                       int cp_chunk) {
  switch (backend) {
    case compute::BackendKind::kCpu:
      for (int stage = 0; stage < topo.pp; ++stage)
        compute::cpu_kv_pages(m.kv_shape(stage, page_size, io::dtype_size(cpu_dtype)), stage,
                              {kv_demand_tokens(lengths, cp_chunk, topo.cp, page_size), 0, lengths}, kv_memory_mb);
      return;
    case compute::BackendKind::kCuda:     // at set-up: cuda::cuda_kv_pages
    case compute::BackendKind::kEmulate:  // no KV
      return;
  }
}

namespace {

// This node's memory: the physical memory, or the job's cgroup limit (Slurm's --mem) if lower.
double node_memory_bytes(bool& cgroup_limited) {
  double bytes = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  cgroup_limited = false;
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    double limit = 0;
    if (in >> limit && limit > 0 && limit < bytes) {  // ("max" reads as no number: no limit)
      bytes = limit;
      cgroup_limited = true;
    }
  }
  return bytes;
}

}  // namespace

void check_forward_memory(compute::BackendKind backend, const dist::Topology& topo, const RankModel& m, int64_t tokens,
                          bool scores, const std::string& hint) {
  if (backend != compute::BackendKind::kCpu) return;
  // This rank's need: its stage's layers, and the head where it runs.
  using compute::Buffer;
  const compute::LayerShape shape(m.config(), m.shard);
  double floats = 2.0 * shape.hidden;  // the hidden states in and out
  for (Buffer b :
       {Buffer::kNormed, Buffer::kQkv, Buffer::kAttention, Buffer::kPartial, Buffer::kGateUp, Buffer::kActivation})
    floats += shape.width(b);
  const bool head = scores && topo.last_stage();
  if (head) floats += m.shard.vocab_count + shape.hidden;  // the head's normed rows and logits
  const double kv_bytes = static_cast<double>(m.kv_shape(topo.stage, 1).bytes_per_page());  // a token's rows
  const double mine = static_cast<double>(std::max<int64_t>(tokens, 0)) * (floats * sizeof(float) + kv_bytes);
  MPI_Comm node;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  double need = 0;
  int ranks = 1;
  MPI_CHECK(MPI_Allreduce(&mine, &need, 1, MPI_DOUBLE, MPI_SUM, node));
  MPI_CHECK(MPI_Comm_size(node, &ranks));
  MPI_CHECK(MPI_Comm_free(&node));
  dist::checked_step(MPI_COMM_WORLD, [&] {
    bool cgroup = false;
    const double have = node_memory_bytes(cgroup);
    if (have <= 0 || need <= have) return;
    char text[768];
    std::snprintf(text, sizeof text,
                  "the %d rank(s) on %s's node need about %.1f GiB for their largest forwards (%lld tokens a rank: "
                  "the layers' buffers and KV rows%s), more than its %.1f GiB of memory%s: lower --chunk-size%s",
                  ranks, topo.world_rank == 0 ? "rank 0" : ("rank " + std::to_string(topo.world_rank)).c_str(),
                  need / std::pow(2.0, 30), static_cast<long long>(tokens), scores ? ", the LM head's rows" : "",
                  have / std::pow(2.0, 30), cgroup ? " (the job's cgroup limit)" : "", hint.c_str());
    throw UserError(text);
  });
}

}  // namespace pf::pipeline
