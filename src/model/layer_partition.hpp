// Which decoder layers each pipeline stage owns.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pf::model {

struct StageRange {
  int first = 0;  // first global layer index
  int count = 0;
};

// SGLang's default: equal shares, the remainder one extra layer each on the *last* stages
// (the last stage finishes a prompt last, so the early stages are the ones that idle less).
std::vector<StageRange> default_partition(int num_layers, int num_stages);

// The default when the last stage also does `last_stage_extra` layers' worth of other work
// (the LM head on every token with --logprobs / --top-k): it takes the number of layers that
// leaves the busiest stage least busy, the others sharing the rest as SGLang's rule does.
// 0: default_partition exactly.
std::vector<StageRange> balanced_partition(int num_layers, int num_stages, double last_stage_extra);

// What the last stage's LM head is worth in layers of `shape`'s model over a batch: the head
// on each scored position (`scored[i]` of prompt i's) against one layer on every position, its
// projections and its attention over all earlier positions. Attention grows with the position,
// so deep in a long prompt the head is a fraction of a layer (SmolLM2: 4.8 layers at 4K
// tokens, 0.4 at 128K): the `last_stage_extra` of a run that scores tokens.
struct ModelShape;
double lm_head_in_layers(const ModelShape& shape, const std::vector<int64_t>& lengths,
                         const std::vector<int64_t>& scored);

// The partition `run` takes when none is given or profiled, and what simulate and advise
// model for it: balanced for the LM head on the scored positions (scored[i] of prompt i's;
// empty or zeros: default_partition).
std::vector<StageRange> run_default_partition(const ModelShape& shape, int num_stages,
                                              const std::vector<int64_t>& lengths, const std::vector<int64_t>& scored);

// "15,15,15,16": one positive count per stage summing to num_layers, else UserError.
std::vector<StageRange> parse_partition(const std::string& text, int num_layers, int num_stages);

std::string partition_text(const std::vector<StageRange>& partition);  // "4,4"

// A partition that evens out measured per-stage busy seconds: a layer's time is the pace of
// the stages before the last (pooled: they do only layers), and the last stage's surplus over
// its layers at that pace counts as extra work (its LM head). Empty when pp < 2 or nothing was
// measured.
std::vector<StageRange> suggested_partition(const std::vector<StageRange>& used, const std::vector<double>& busy_s);

}  // namespace pf::model
