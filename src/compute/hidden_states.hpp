// Which final hidden states a run hands back per prompt (--hidden-states): none, the
// final-norm output at the prompt's last position, or its mean over the prompt. Parsed once,
// in src/cli; the last stage computes them chunk by chunk (pipeline/stage_loop.cpp).
#pragma once

namespace pf::compute {

enum class HiddenStatesKind {
  kNone,  // no /hidden_states (the default)
  kLast,  // final norm of the prompt's last position (Hugging Face's last_hidden_state[-1])
  kMean,  // mean of the final norm over every position of the prompt
};

// The --hidden-states spelling (echoed configuration, output attributes, identity).
inline const char* hidden_states_name(HiddenStatesKind kind) {
  switch (kind) {
    case HiddenStatesKind::kNone: return "none";
    case HiddenStatesKind::kLast: return "last";
    case HiddenStatesKind::kMean: return "mean";
  }
  return "?";
}

}  // namespace pf::compute
