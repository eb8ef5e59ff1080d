// Weight upload and device-side fill (see device_weights.hpp).
#include "compute/cuda/device_weights.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "compute/cpu/thread_pool.hpp"
#include "io/bf16.hpp"
#include "io/safetensors.hpp"

namespace pf::cuda {

std::vector<bf16> to_bf16(const std::vector<float>& values) {
  std::vector<bf16> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    __nv_bfloat16_raw raw;
    raw.x = io::float_to_bf16(values[i]);  // round to nearest even, as the safetensors writer
    out[i] = raw;
  }
  return out;
}

namespace {

// Converted (on the rank's threads) and copied in blocks of 4 Mi values through one reused
// buffer: no whole bf16 copy of each tensor on the host (fresh memory for it would cost as
// much as the copy).
DeviceArray<bf16> put(const std::vector<float>& host) {
  constexpr size_t kBlock = size_t{1} << 22, kPart = size_t{1} << 18;
  static_assert(sizeof(bf16) == sizeof(uint16_t));
  thread_local std::vector<uint16_t> staging;  // bf16 bits, as __nv_bfloat16 holds them
  cpu::ThreadPool& pool = cpu::ThreadPool::instance();
  DeviceArray<bf16> d(host.size());
  for (size_t begin = 0; begin < host.size(); begin += kBlock) {
    const size_t count = std::min(kBlock, host.size() - begin);
    staging.resize(count);
    const int parts = static_cast<int>(std::clamp<size_t>(count / kPart, 1, pool.threads()));
    uint16_t* out = staging.data();  // this thread's buffer: inside the tasks `staging` is each worker's own
    pool.run(parts, [&](int part, int) {
      const size_t first = count * part / parts, last = count * (part + 1) / parts;
      ::pf::bf16::narrow(host.data() + begin + first, static_cast<int64_t>(last - first), out + first);
    });
    CUDA_CHECK(cudaMemcpy(d.data() + begin, staging.data(), count * sizeof(bf16), cudaMemcpyHostToDevice));
  }
  return d;
}

DeviceArray<float> put_float(const std::vector<float>& host) {
  DeviceArray<float> d;
  d.upload(host);
  return d;
}

DeviceSwiglu put(const model::SwigluWeights& host) {
  return {put(host.gate_up), put(host.down)};
}

size_t sum_bytes(const DeviceLayer& l) {
  size_t total = l.input_norm.bytes() + l.qkv.bytes() + l.qkv_bias.bytes() + l.q_norm.bytes() + l.k_norm.bytes() +
                 l.o.bytes() + l.post_norm.bytes() + l.gate_up.bytes() + l.down.bytes();
  total += l.q_a.bytes() + l.q_a_norm.bytes() + l.q_b.bytes() + l.kv_a.bytes() + l.kv_a_norm.bytes() + l.kv_b.bytes();
  total += l.router.bytes() + l.router_bias.bytes() + l.shared_gate.bytes();
  for (const DeviceSwiglu& expert : l.experts) total += expert.gate_up.bytes() + expert.down.bytes();
  return total + l.shared.gate_up.bytes() + l.shared.down.bytes();
}

// Matches the synthetic presets' ranges: projections uniform in +-sqrt(3 / fan_in)
// (unit-variance outputs), embeddings in +-1, norm gains 1 +- 0.1, biases +-0.1.
DeviceArray<bf16> filled(size_t count, uint64_t seed, float scale, float offset = 0.0f) {
  DeviceArray<bf16> d(count);
  if (offset == 0.0f) {
    kernels::fill_uniform_bf16(d.data(), static_cast<int64_t>(count), seed, scale, nullptr);
  } else {  // gains near 1: small enough to fill on the host
    std::vector<float> host(count);
    for (size_t i = 0; i < count; ++i) host[i] = offset + scale * std::sin(static_cast<float>(seed * 7919 + i));
    d.upload(to_bf16(host));
  }
  CUDA_CHECK_LAUNCH();
  return d;
}

}  // namespace

size_t DeviceWeights::bytes() const {
  size_t total = embedding.bytes() + final_norm.bytes() + lm_head.bytes();
  for (const auto& l : layers) total += sum_bytes(l);
  return total;
}

DeviceWeights DeviceWeights::upload(const model::StageWeights& host) {
  DeviceWeights w;
  for (const auto& l : host.layers) w.layers.push_back(upload_layer(l));
  w.upload_ends(host);
  return w;
}

void DeviceWeights::upload_ends(const model::StageWeights& host) {
  first_layer = host.first_layer;
  embedding = put(host.embedding);
  final_norm = put(host.final_norm);
  lm_head = put(host.lm_head);
}

DeviceLayer DeviceWeights::upload_layer(const model::LayerWeights& l) {
  DeviceLayer d;
  d.input_norm = put(l.input_norm);
  d.qkv = put(l.qkv);
  d.qkv_bias = put(l.qkv_bias);
  d.q_norm = put(l.q_norm);
  d.k_norm = put(l.k_norm);
  d.o = put(l.o);
  d.post_norm = put(l.post_norm);
  d.gate_up = put(l.gate_up);
  d.down = put(l.down);
  d.q_a = put(l.q_a);
  d.q_a_norm = put(l.q_a_norm);
  d.q_b = put(l.q_b);
  d.kv_a = put(l.kv_a);
  d.kv_a_norm = put(l.kv_a_norm);
  d.kv_b = put(l.kv_b);
  d.router = put_float(l.router);
  d.router_bias = put_float(l.router_bias);
  d.shared_gate = put_float(l.shared_gate);
  for (const model::SwigluWeights& expert : l.experts) d.experts.push_back(put(expert));
  d.shared = put(l.shared);
  return d;
}

DeviceWeights DeviceWeights::random(const model::ModelConfig& c, const model::ShardSpec& s, int num_layers,
                                    bool first_stage, bool last_stage, uint64_t seed) {
  if (c.is_moe() || c.is_mla())
    throw std::invalid_argument("DeviceWeights::random fills dense models only (" + c.architecture_name + ")");
  DeviceWeights w;
  const size_t h = c.hidden_size, d = c.head_dim;
  const size_t qkv_rows = (s.heads + 2 * s.kv_heads) * d;
  uint64_t next = seed * 1000003;
  auto proj = [&](size_t rows, size_t fan_in) { return filled(rows * fan_in, ++next, std::sqrt(3.0f / fan_in)); };
  if (first_stage) w.embedding = filled(static_cast<size_t>(c.vocab_size) * h, ++next, 1.0f);
  for (int i = 0; i < num_layers; ++i) {
    DeviceLayer l;
    l.input_norm = filled(h, ++next, 0.1f, 1.0f);
    l.qkv = proj(qkv_rows, h);
    if (c.attention_bias) l.qkv_bias = filled(qkv_rows, ++next, 0.1f);
    if (c.qk_norm) {
      l.q_norm = filled(d, ++next, 0.1f, 1.0f);
      l.k_norm = filled(d, ++next, 0.1f, 1.0f);
    }
    l.o = proj(h, s.heads * d);
    l.post_norm = filled(h, ++next, 0.1f, 1.0f);
    l.gate_up = proj(2ull * s.intermediate, h);
    l.down = proj(h, s.intermediate);
    w.layers.push_back(std::move(l));
  }
  if (last_stage) {
    w.final_norm = filled(h, ++next, 0.1f, 1.0f);
    w.lm_head = proj(s.vocab_count, h);
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  return w;
}

}  // namespace pf::cuda
