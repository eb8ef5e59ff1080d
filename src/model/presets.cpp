// Preset shapes. `tiny*` are for tests (fast on 2 cores, every architecture feature on),
// `small` (~250M parameters) and `small-moe` (the same active size) for CPU benchmarks,
// `llama3-8b` is the real Llama-3-8B shape.
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

// Qwen3-MoE shaped: 8 experts, top 2, a dense first layer (mlp_only_layers [0]).
ModelConfig moe(ModelConfig c, int experts, int per_token, int width) {
  c.architecture = Architecture::kQwen3Moe;
  c.architecture_name = "Qwen3MoeForCausalLM";
  c.qk_norm = true;
  c.moe.experts = experts;
  c.moe.experts_per_token = per_token;
  c.moe.intermediate = width;
  c.moe.norm_topk_prob = true;
  c.moe.sparse_layer.assign(c.num_layers, true);
  c.moe.sparse_layer[0] = false;
  return c;
}

// DeepSeek-V3 shaped: MLA with q LoRA, YaRN, a dense first layer, a shared expert, the
// sigmoid router over 4 groups of 2 experts choosing among the best 2 groups.
ModelConfig tiny_mla() {
  ModelConfig c = tiny();
  c.architecture = Architecture::kDeepseekV3;
  c.architecture_name = "DeepseekV3ForCausalLM";
  c.num_layers = 4;
  c.num_kv_heads = c.num_heads;
  c.mla = {64, 64, 32, 16, 32, true};
  c.head_dim = c.mla.qk_nope_head_dim + c.mla.qk_rope_head_dim;
  c.rope_scaling = {};
  c.rope_scaling.yarn = true;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.original_max_position_embeddings = 256;
  c.rope_scaling.mscale = 1.0;
  c.rope_scaling.mscale_all_dim = 1.0;
  c.moe.experts = 8;
  c.moe.experts_per_token = 2;
  c.moe.intermediate = 64;
  c.moe.shared_intermediate = 64;
  c.moe.router = Router::kSigmoidGrouped;
  c.moe.norm_topk_prob = true;
  c.moe.routed_scaling_factor = 2.5;
  c.moe.groups = 4;
  c.moe.topk_groups = 2;
  c.moe.score_correction_bias = true;
  c.moe.sparse_layer = {false, true, true, true};
  return c;
}

}  // namespace

std::vector<std::string> preset_names() {
  return {"tiny", "tiny-qwen2", "tiny-qwen3", "tiny-moe", "tiny-mla", "small", "small-moe", "llama3-8b"};
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
  if (name == "tiny-moe") return moe(preset_config("tiny-qwen3"), 8, 2, 64);
  if (name == "tiny-mla") return tiny_mla();
  // `small`'s active size: 4 of 16 experts as wide as small's MLP / 4 (12.6M active MLP
  // parameters a layer, 50M stored).
  if (name == "small-moe") return moe(preset_config("small"), 16, 4, 1024);
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

ModelShape shape_of_model_config(const std::string& flag) {
  if (flag.rfind("synthetic:", 0) == 0) return shape_from_config(preset_config(flag.substr(10)));
  return load_model_shape(flag);
}

std::string model_config_file(const std::string& flag) {
  if (flag.empty() || flag.rfind("synthetic:", 0) == 0) return "";
  return config_json_path(flag);
}

std::string run_refusal(const std::string& flag) {
  const std::string file = model_config_file(flag);
  if (file.empty()) return "";
  try {
    load_config_file(file);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace pf::model
