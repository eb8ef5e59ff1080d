// Built-in model shapes for `make-model --preset` and `--model synthetic:NAME`.
#pragma once

#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/model_shape.hpp"

namespace pf::model {

// Throws UserError listing the known names when `name` is not one of them.
ModelConfig preset_config(const std::string& name);
// A --model-config flag of the study commands (simulate, advise): a config.json path, or
// synthetic:PRESET. UserError on a bad file or an unknown preset.
ModelShape shape_of_model_config(const std::string& flag);
// The file such a flag reads ("" for a preset; a model directory's config.json): what a study
// command's own output (--plot, --timeline) must not be.
std::string model_config_file(const std::string& flag);
// Why `pipefill run` would refuse such a flag's model (its config reader's error), or "": a
// study may model another engine's model from its shape alone, and says so.
std::string run_refusal(const std::string& flag);
std::vector<std::string> preset_names();

}  // namespace pf::model
