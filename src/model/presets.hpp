// Built-in model shapes for `make-model --preset` and `--model synthetic:NAME`.
#pragma once

#include <string>
#include <vector>

#include "model/config.hpp"

namespace pf::model {

// Throws UserError listing the known names when `name` is not one of them.
ModelConfig preset_config(const std::string& name);
std::vector<std::string> preset_names();

}  // namespace pf::model
