// Quantities as people write them on a command line: durations (90s, 10m, 1.5h, 2d, or a
// plain number of seconds: --checkpoint-every, --mtbf) and sizes (500G, 1.5T, 800MB, or a plain
// number of bytes: --kv-store-limit).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
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

// Bytes, > 0: a number with K, M, G, T (powers of 1024, an optional B or iB after) or none;
// UserError naming `flag` otherwise.
inline uint64_t parse_size(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double number = std::strtod(text.c_str(), &end);
  std::string unit = end ? std::string(end) : "";
  for (const char* suffix : {"iB", "B"})
    if (unit.size() > 1 && unit.size() >= std::strlen(suffix) &&
        unit.compare(unit.size() - std::strlen(suffix), std::string::npos, suffix) == 0) {
      unit.resize(unit.size() - std::strlen(suffix));
      break;
    }
  double scale = 0;
  if (unit.empty() || unit == "B")
    scale = 1;
  else if (unit == "K" || unit == "k")
    scale = 1024.0;
  else if (unit == "M")
    scale = 1024.0 * 1024;
  else if (unit == "G")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "T")
    scale = 1024.0 * 1024 * 1024 * 1024;
  const double bytes = number * scale;
  if (text.empty() || end == text.c_str() || scale == 0 || !std::isfinite(bytes) || bytes < 1 || bytes > 1.8e19)
    throw UserError(flag + " \"" + text + "\" is not a size (a positive number with K, M, G or T: 500G, 1.5T)");
  return static_cast<uint64_t>(bytes);
}

}  // namespace pf::cli
