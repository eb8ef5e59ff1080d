// Preset shapes. `tiny*` are for tests (fast on 2 cores, every architecture feature on),
// `small` (~250M parameters) for CPU benchmarks, `llama3-8b` is the real Llama-3-8B shape.
#include "model/presets.hpp"

#include "errors.hpp"

namespace pf::model {
namespace {

ModelConfig tiny() {
  ModelConfig c;
  c.hidden_size = 128;
  c.intermediate_size = 256;
  c.num_layers = 8;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 32;
  c.vocab_size = 512;
  c.max_position_embeddings = 131072;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  // llama3 scaling with a short original context so that every band of the
  // frequency remap (kept, interpolated, divided) is exercised by the tests.
  c.rope_scaling = {true, 8.0, 1.0, 4.0, 256.0};
  return c;
}

}  // namespace

std::vector<std::string> preset_names() {
  return {"tiny", "tiny-qwen2", "tiny-qwen3", "small", "llama3-8b"};
}

ModelConfig preset_config(const std::string& name) {
  if (name == "tiny") return tiny();
  if (name == "tiny-qwen2") {
    ModelConfig c = tiny();
    c.architecture = Architecture::kQwen2;
    c.architecture_name = "Qwen2ForCausalLM";
    c.attention_bias = true;
    c.tie_word_embeddings = true;
    c.rope_scaling = {};
    c.rope_theta = 1000000.0;
    return c;
  }
  if (name == "tiny-qwen3") {
    ModelConfig c = tiny();
    c.architecture = Architecture::kQwen3;
    c.architecture_name = "Qwen3ForCausalLM";
    c.qk_norm = true;
    c.head_dim = 48;  // Qwen3 decouples head_dim from hidden/heads
    c.rope_scaling = {};
    c.rope_theta = 1000000.0;
    return c;
  }
  if (name == "small") {
    ModelConfig c;
    c.hidden_size = 1024;
    c.intermediate_size = 4096;
    c.num_layers = 12;
    c.num_heads = 16;
    c.num_kv_heads = 8;
    c.head_dim = 64;
    c.vocab_size = 32000;
    c.max_position_embeddings = 131072;
    c.rope_theta = 500000.0;
    return c;  // 12 * 15.7M + 2 * 32.8M = 254M parameters
  }
  if (name == "llama3-8b") {
    ModelConfig c;
    c.hidden_size = 4096;
    c.intermediate_size = 14336;
    c.num_layers = 32;
    c.num_heads = 32;
    c.num_kv_heads = 8;
    c.head_dim = 128;
    c.vocab_size = 128256;
    c.max_position_embeddings = 131072;
    c.rope_theta = 500000.0;
    c.rope_scaling = {true, 8.0, 1.0, 4.0, 8192.0};
    return c;
  }
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw UserError("unknown model preset \"" + name + "\" (known: " + known + ")");
}

}  // namespace pf::model
