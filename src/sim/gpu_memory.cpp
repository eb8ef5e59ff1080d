// Device memory of a layout (see gpu_memory.hpp).
#include "sim/gpu_memory.hpp"

#include <algorithm>

namespace pf::sim {

DeviceMemory busiest_device(const model::ModelShape& shape, const std::vector<model::StageRange>& partition, int tp,
                            int cp, int chunk_tokens, int64_t longest_prompt, bool fp8_weights) {
  const double weight_bytes = fp8_weights ? 1.0 : 2.0, kv_value_bytes = 2.0, activation_bytes = 4.0;
  const double h = shape.hidden_size, heads = static_cast<double>(shape.num_heads) / tp;
  const double kv_values = shape.mla() ? shape.cached_values_per_token() : shape.cached_values_per_token() / tp;
  // One CP rank's share of a chunk and of the prompt (the first ranks take the remainder).
  const double tokens = static_cast<double>((chunk_tokens + cp - 1) / cp);
  const double kv_tokens = static_cast<double>((longest_prompt + cp - 1) / cp);
  DeviceMemory busiest;
  for (size_t s = 0; s < partition.size(); ++s) {
    DeviceMemory m;
    m.stage = static_cast<int>(s);
    double widest_mlp = 0;
    for (int layer = partition[s].first; layer < partition[s].first + partition[s].count; ++layer) {
      const double replicated = shape.replicated_layer_parameters(layer);
      m.weights += weight_bytes * ((shape.layer_parameters(layer) - replicated) / tp + replicated);
      m.kv += kv_value_bytes * kv_values * kv_tokens;
      const double mlp = shape.moe_layer(layer)
                             ? static_cast<double>(shape.experts_per_token) * shape.moe_intermediate_size +
                                   shape.shared_expert_intermediate_size
                             : shape.intermediate_size;
      widest_mlp = std::max(widest_mlp, mlp);
    }
    const double embedding = 2.0 * h * shape.vocab_size;  // bf16
    if (s == 0) m.weights += embedding;
    if (s + 1 == partition.size() && !(partition.size() == 1 && shape.tie_word_embeddings)) m.weights += embedding / tp;
    // Hidden state, residual, normed input and attention output (h each), Q K V and the gate,
    // up and product of the MLP on this rank's heads and width.
    const double per_token = 4.0 * h + heads * shape.head_dim + 2.0 * kv_values + 3.0 * widest_mlp / tp;
    m.workspace = kRuntimeBytes + activation_bytes * tokens * per_token;
    if (m.total() > busiest.total()) busiest = m;
  }
  return busiest;
}

bool fits_device(const DeviceMemory& memory, double device_bytes, double kv_memory_fraction) {
  const double left = device_bytes - memory.weights - memory.workspace;
  return left > 0 && memory.kv <= kv_memory_fraction * left;
}

}  // namespace pf::sim
