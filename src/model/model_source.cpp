// --model resolution.
#include "model/model_source.hpp"

#include <filesystem>

#include "errors.hpp"
#include "io/file_checks.hpp"
#include "model/presets.hpp"
#include "model/quantization.hpp"

namespace pf::model {

ModelSource open_model(const std::string& model_flag, uint64_t seed) {
  ModelSource source;
  const std::string prefix = "synthetic:";
  if (model_flag.rfind(prefix, 0) == 0) {
    source.config = preset_config(model_flag.substr(prefix.size()));
    source.tensors = make_synthetic_source(source.config, seed);
    source.synthetic = true;
    return source;
  }
  std::error_code error;
  if (std::filesystem::exists(model_flag, error) && !std::filesystem::is_directory(model_flag, error))
    throw UserError("--model " + model_flag +
                    " is a file, not a model directory (config.json and *.safetensors; only --backend emulate takes "
                    "a config.json by itself)");
  if (!std::filesystem::is_directory(model_flag, error))
    throw UserError("model directory " + model_flag + " does not exist (or use --model synthetic:PRESET)");
  const std::string config_path = (std::filesystem::path(model_flag) / "config.json").string();
  io::require_regular_file(config_path, "model config");  // a FIFO would block the read
  const nlohmann::json config_json = read_config_json(config_path);
  source.config = parse_config(config_json, config_path);
  source.tensors = open_checkpoint(model_flag, parse_quantization(config_json, config_path));
  // tie_word_embeddings with an lm_head.weight of its own in the checkpoint: transformers (5.x)
  // does not tie them then, and computes the logits with lm_head.weight (the values may
  // differ from the embeddings'). So do we: the config says what the model is from here on.
  if (source.config.tie_word_embeddings && source.tensors->has("lm_head.weight"))
    source.config.tie_word_embeddings = false;
  return source;
}

}  // namespace pf::model
