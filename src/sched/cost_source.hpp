// Where per-stage costs come from (--cost-model), parsed once in src/cli: nothing (profile
// now, when a dynamic policy needs costs), a saved `pipefill profile` JSON, or an analytic
// model of some hardware (analytic:NAME, the emulator's sleeps).
#pragma once

#include <string>

namespace pf::sched {

constexpr char kAnalyticPrefix[] = "analytic:";  // --cost-model analytic:NAME

struct CostSource {
  enum class Kind { kNone, kProfileFile, kAnalytic };
  Kind kind = Kind::kNone;
  std::string value;  // the profile's path, or the hardware's name (hardware/NAME.json or a path)

  bool none() const { return kind == Kind::kNone; }
  bool profile_file() const { return kind == Kind::kProfileFile; }
  bool analytic() const { return kind == Kind::kAnalytic; }
  // As the user wrote it: "", "cost.json" or "analytic:h20".
  std::string flag_text() const { return analytic() ? kAnalyticPrefix + value : value; }
};

}  // namespace pf::sched
