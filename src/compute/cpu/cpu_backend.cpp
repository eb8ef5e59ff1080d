// cpu backend factory (see cpu_backend.hpp).
#include "compute/cpu/cpu_backend.hpp"

#include <nlohmann/json.hpp>

#include "compute/cpu/attention.hpp"
#include "compute/cpu/blas_kernels.hpp"
#include "compute/cpu/cpu_features.hpp"
#include "compute/cpu/cpu_stage_compute.hpp"
#include "compute/cpu/gemm.hpp"
#include "compute/cpu/rank_threads.hpp"
#include "dist/checked_step.hpp"
#include "dist/host_all_reduce.hpp"
#include "dist/host_cp_ring.hpp"
#include "dist/host_transport.hpp"
#include "dist/root_decision.hpp"
#include "errors.hpp"
#include "kvcache/kv_capacity.hpp"

namespace pf::compute {

int cpu_kv_pages(const kv::KvShape& shape, int stage, const KvDemand& demand, int64_t kv_memory_mb) {
  int pages = kv::pool_pages_for(shape, demand.prompt_lengths, kv_memory_mb, stage, demand.whole_prompts);
  if (demand.profile_room_tokens > 0)
    pages = kv::profiling_pages(shape, demand.profile_room_tokens, kv_memory_mb, pages);
  return pages;
}

StageBackend make_cpu_backend(const dist::Topology& topo, const model::ModelConfig& config,
                              const model::ShardSpec& shard, const kv::KvShape& kv_shape, int64_t kv_memory_mb,
                              int threads, const KvDemand& demand, const WeightsLoader& load_weights,
                              sched::CpAttention cp_attention) {
  int pages = 0;
  dist::checked_step(MPI_COMM_WORLD, [&] { pages = cpu_kv_pages(kv_shape, topo.stage, demand, kv_memory_mb); });
  dist::checked_step(MPI_COMM_WORLD, [&] {
    try {
      cpu::kernel_isa();        // a bad PIPEFILL_CPU_ISA is a user's error, before any weight is read
      cpu::f32_gemm_kernels();  // and a bad PIPEFILL_F32_GEMM
    } catch (const std::runtime_error& e) {
      throw UserError(e.what());
    }
  });
  if (kv_shape.element_bytes == 2) {
    // --dtype bf16: one GEMM for the job, rank 0's (it measures, or reads PIPEFILL_BF16_GEMM);
    // ranks timed alone on a busy node could otherwise pick different ones.
    const nlohmann::json chosen = nlohmann::json::parse(dist::decide_on_root(MPI_COMM_WORLD, [] {
      try {
        const cpu::Bf16GemmKernels k = cpu::decide_bf16_gemm();
        return nlohmann::json{{"dot", k.dot}, {"forced", k.forced}, {"rate", k.rates.dot}, {"fma", k.rates.fma}}.dump();
      } catch (const std::runtime_error& e) {
        throw UserError(e.what());
      }
    }));
    cpu::use_bf16_gemm({chosen["dot"].get<bool>(),
                        chosen["forced"].get<bool>(),
                        {chosen["rate"].get<double>(), chosen["fma"].get<double>()}});
  }
  // The rank's threads first: loading the weights uses them too (model/weights.cpp).
  const RankThreads rank_threads = decide_rank_threads(threads, MPI_COMM_WORLD);
  use_rank_threads(rank_threads);
  StageBackend backend;
  backend.kv_pool = std::make_unique<kv::PagedKvPool>(kv_shape, pages);
  if (topo.tp > 1) backend.all_reduce = std::make_unique<dist::HostAllReduce>(topo.tp_comm);
  if (topo.cp > 1) backend.cp_ring = std::make_unique<dist::HostCpRing>(topo.cp_comm);
  backend.compute = std::make_unique<CpuStageCompute>(config, shard, load_weights({}), *backend.kv_pool,
                                                      backend.all_reduce.get(), backend.cp_ring.get(), cp_attention);
  backend.make_transport = [&topo](size_t floats) {
    return std::make_unique<dist::HostTransport>(floats, topo.prev_rank, topo.next_rank, topo.pipeline_comm);
  };
  backend.description = kv_shape.element_bytes == 2 ? "cpu (bf16)" : "cpu";
  backend.detail =
      std::string(kv_shape.element_bytes == 2
                      ? "bf16 weights and KV cache (float32 sums), " + cpu::bf16_gemm_description() + ", "
                      : "") +
      (config.is_mla()
           ? std::string("latent (MLA) attention on sgemm")
           : cpu::attention_kernel_name(config.head_dim, kv_shape.element_bytes == 2, topo.cp > 1) + " attention") +
      ", " + cpu::f32_gemm_description() + ", " + describe(rank_threads);
  // OpenBLAS's kernels matter where the projections run on it (not where ours run them).
  if (const std::string warning = cpu::f32_gemm_kernels().own ? "" : cpu::blas_kernels_warning();
      !warning.empty() && topo.is_writer())
    std::fprintf(stderr, "warning: %s\n", warning.c_str());
  return backend;
}

}  // namespace pf::compute
