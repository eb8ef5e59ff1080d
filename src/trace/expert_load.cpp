// Expert load: gathering and the summary line (see expert_load.hpp).
#include "trace/expert_load.hpp"

#include <algorithm>
#include <numeric>

#include "dist/collectives.hpp"
#include "errors.hpp"

namespace pf::trace {

namespace {

// The mean over the MoE layers (each routed some rows: gather_expert_load keeps only those)
// of the busiest of `parts` equal groups of experts against the mean group.
double busiest_over_mean(const std::vector<std::vector<int64_t>>& rows, int parts) {
  if (rows.empty()) return 0.0;
  double sum = 0;
  for (const auto& layer : rows) {
    const size_t per_part = layer.size() / parts;
    double busiest = 0;
    for (int part = 0; part < parts; ++part)
      busiest = std::max(busiest,
                         std::accumulate(layer.begin() + part * per_part, layer.begin() + (part + 1) * per_part, 0.0));
    sum += busiest / (std::accumulate(layer.begin(), layer.end(), 0.0) / parts);
  }
  return sum / rows.size();
}

}  // namespace

double ExpertLoad::max_over_mean() const {
  return busiest_over_mean(rows, experts);
}

double ExpertLoad::busiest_rank_share() const {
  return tp > 1 && experts % tp == 0 ? busiest_over_mean(rows, tp) : 0.0;
}

ExpertLoad gather_expert_load(const dist::Topology& topo, const std::vector<int64_t>& mine, int experts) {
  // With --cp a stage's CP ranks each routed their own rows: their counts add up first.
  std::vector<int64_t> stage_rows = mine;
  if (topo.cp > 1 && !stage_rows.empty()) {
    MPI_Request request;
    MPI_CHECK(MPI_Iallreduce(mine.data(), stage_rows.data(), static_cast<int>(mine.size()), MPI_INT64_T, MPI_SUM,
                             topo.cp_comm, &request));
    dist::wait_polling(&request);
  }
  const bool speaks = topo.tp_rank == 0 && topo.cp_rank == 0;
  const auto all = dist::gather_vector(speaks ? stage_rows : std::vector<int64_t>(), 0, MPI_COMM_WORLD);
  ExpertLoad load;
  load.experts = experts;
  load.tp = topo.tp;
  if (experts <= 0) return load;
  for (const auto& stage : all)  // ranks in order: stages in order, their layers in order
    for (size_t at = 0; at + experts <= stage.size(); at += experts) {
      std::vector<int64_t> layer(stage.begin() + at, stage.begin() + at + experts);
      if (std::accumulate(layer.begin(), layer.end(), int64_t{0}) > 0) load.rows.push_back(std::move(layer));
    }
  return load;
}

void print_expert_load(const ExpertLoad& load, std::FILE* out) {
  if (load.rows.empty()) return;
  std::fprintf(out, "experts: the busiest of %d experts took %.2fx the mean expert's tokens (mean over %zu MoE layers)",
               load.experts, load.max_over_mean(), load.rows.size());
  if (load.busiest_rank_share() > 0)
    std::fprintf(out, "; with whole experts per TP rank the busiest of %d ranks would take %.2fx its share", load.tp,
                 load.busiest_rank_share());
  std::fprintf(out, "\n");
}

}  // namespace pf::trace
