// Durations as people write them on a command line: 90s, 10m, 1.5h, 2d, or a plain number of
// seconds. Used by --checkpoint-every and --mtbf.
#pragma once

#include <cmath>
#include <cstdlib>
#include <string>

#include "errors.hpp"

namespace pf::cli {

// Seconds, > 0; UserError naming `flag` otherwise.
inline double parse_duration(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double number = std::strtod(text.c_str(), &end);
  const std::string unit = end ? std::string(end) : "";
  double scale = 0;
  if (unit.empty() || unit == "s")
    scale = 1;
  else if (unit == "m" || unit == "min")
    scale = 60;
  else if (unit == "h")
    scale = 3600;
  else if (unit == "d")
    scale = 86400;
  const double seconds = number * scale;
  if (text.empty() || end == text.c_str() || scale == 0 || !std::isfinite(seconds) || seconds <= 0)
    throw UserError(flag + " \"" + text + "\" is not a duration (a positive number with s, m, h or d: 90s, 10m, 1.5h)");
  return seconds;
}

}  // namespace pf::cli
