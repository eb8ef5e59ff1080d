// Device memory of a layout (see gpu_memory.hpp).
#include "sim/gpu_memory.hpp"

#include <algorithm>

#include "sched/context_split.hpp"
#include "sched/cp_ring_widths.hpp"
#include "sched/dynamic_chunker.hpp"
#include "sched/hidden_slots.hpp"

namespace pf::sim {

DeviceStorage DeviceStorage::of(const HardwareSpec& hw, bool fp8_weights) {
  DeviceStorage s;
  if (hw.cpu) {  // float32 weights and cache (the cpu backend's default), the node's memory shared by its ranks
    s.weight_bytes = s.embedding_bytes = 4;
    s.kv_bytes = 4;
    s.memory_bytes = hw.memory_bytes / hw.devices_per_node;
  } else {
    s.weight_bytes = fp8_weights ? 1 : 2;
    s.kv_bytes = 2;
    s.runtime_bytes = 1.5 * kGiB;  // an estimate for Hopper with a few communicators
    s.memory_bytes = hw.memory_bytes;
  }
  return s;
}

DeviceMemory busiest_device(const model::ModelShape& shape, const std::vector<model::StageRange>& partition, int tp,
                            int cp, int initial_chunk, int page_size, int64_t longest_prompt,
                            const DeviceStorage& storage, int ring_depth, bool scores) {
  constexpr double kActivationBytes = 4, kRingBytes = 2;  // float32 activations; the cuda ring moves bf16 shards
  const double h = shape.hidden_size, heads = static_cast<double>(shape.num_heads) / tp;
  const double kv_values = shape.mla() ? shape.cached_values_per_token() : shape.cached_values_per_token() / tp;
  const double chunk = sched::longest_chunk(initial_chunk, page_size);
  // A CP rank's layer buffers hold its share of a chunk (the cuda backend reserves that much),
  // and so do its hidden-state slots but on the last stage's CP rank 0, which with per-token
  // scores gathers the chunk's rows into them and then into a buffer of that size again
  // (without them a prompt's last row).
  const double chunk_rows = cp > 1 ? sched::cp_most_rows(static_cast<int>(chunk), cp) : chunk;
  // (Search offers CP only with chunks of at least 2 cp tokens, where this is cp_shard_lengths.)
  const double rows = static_cast<double>(sched::cp_shard_bound(longest_prompt, initial_chunk, cp));
  // pass-Q's gathered queries, its partials and those returned, for a chunk
  // (RingOnGpu::reserve): the cuda ring's widths (MLA absorbed: latent-wide queries,
  // kv_lora-wide outputs).
  const sched::CpWidths w = sched::cp_ring_widths(shape, tp, /*cuda=*/true);
  const double out_width = static_cast<double>(w.heads) * w.head_out;
  const double ring =
      cp > 1 ? 2 * kRingBytes * kv_values * rows + kActivationBytes * chunk * (w.query + 2 * (out_width + w.heads)) : 0;
  DeviceMemory busiest;
  for (size_t s = 0; s < partition.size(); ++s) {
    DeviceMemory m;
    m.stage = static_cast<int>(s);
    double widest_mlp = 0;
    for (int layer = partition[s].first; layer < partition[s].first + partition[s].count; ++layer) {
      const double replicated = shape.replicated_layer_parameters(layer);
      m.weights += storage.weight_bytes * ((shape.layer_parameters(layer) - replicated) / tp + replicated);
      m.kv += storage.kv_bytes * kv_values * rows;
      const double mlp = shape.moe_layer(layer)
                             ? static_cast<double>(shape.experts_per_token) * shape.moe_intermediate_size +
                                   shape.shared_expert_intermediate_size
                             : shape.intermediate_size;
      widest_mlp = std::max(widest_mlp, mlp);
    }
    const double embedding = h * shape.vocab_size;
    if (s == 0) m.weights += storage.embedding_bytes * embedding;
    if (s + 1 == partition.size() && !(partition.size() == 1 && shape.tie_word_embeddings))
      m.weights += storage.embedding_bytes * embedding / tp;
    // The hidden-state slots the stage holds at once (on the last stage, CP rank 0's: the
    // busiest), then per row computed: the residual, the normed input and the attention
    // output (h each), Q and this rank's K and V, and the MLP's gate, up and product on this
    // rank's width.
    const bool first = s == 0, last = s + 1 == partition.size();
    const bool gathers_chunk = last && sched::last_stage_reads_every_row(scores, false);
    const double slots = static_cast<double>(sched::hidden_slots_held(ring_depth, first, last)) *
                         sched::hidden_slot_rows(static_cast<int>(chunk), cp, gathers_chunk) * h;
    const double per_row = 3.0 * h + heads * shape.head_dim + kv_values + 3.0 * widest_mlp / tp;
    const double gathered = cp > 1 && last ? (gathers_chunk ? chunk : 1.0) * h : 0;
    m.workspace = storage.runtime_bytes + kActivationBytes * (slots + chunk_rows * per_row + gathered) + ring;
    if (m.total() > busiest.total()) busiest = m;
  }
  return busiest;
}

bool fits_device(const DeviceMemory& memory, const DeviceStorage& storage, double kv_memory_fraction) {
  if (storage.memory_bytes <= 0) return true;
  const double left = storage.memory_bytes - memory.weights - memory.workspace;
  return left > 0 && memory.kv <= kv_memory_fraction * left;
}

}  // namespace pf::sim
