// Quantities as people write them on a command line: durations (90s, 10m, 1.5h, 2d, or a
// plain number of seconds: --checkpoint-every, --mtbf) and sizes (500G, 1.5T, 800MB, or a plain
// number of bytes: --kv-store-limit).
#pragma once

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "errors.hpp"

namespace pf::cli {

// `text` as a number followed by one of `units` (each with its scale), scaled; nullopt when it
// is not one, or not finite.
inline std::optional<double> scaled_number(const std::string& text,
                                           const std::vector<std::pair<std::string, double>>& units) {
  char* end = nullptr;
  const double number = std::strtod(text.c_str(), &end);
  if (text.empty() || end == text.c_str() || std::isspace(static_cast<unsigned char>(text[0]))) return std::nullopt;
  for (const auto& [unit, scale] : units)
    if (unit == end && std::isfinite(number * scale)) return number * scale;
  return std::nullopt;
}

// Seconds, > 0; UserError naming `flag` otherwise.
inline double parse_duration(const std::string& flag, const std::string& text) {
  const std::optional<double> seconds =
      scaled_number(text, {{"", 1}, {"s", 1}, {"m", 60}, {"min", 60}, {"h", 3600}, {"d", 86400}});
  if (!seconds || *seconds <= 0)
    throw UserError(flag + " \"" + text + "\" is not a duration (a positive number with s, m, h or d: 90s, 10m, 1.5h)");
  return *seconds;
}

// Bytes, >= 1: a number with K, M, G or T (powers of 1024; either case, KB, KiB and the like
// too), or a whole number of bytes; UserError naming `flag` otherwise.
inline uint64_t parse_size(const std::string& flag, const std::string& text) {
  std::vector<std::pair<std::string, double>> units = {{"", 1}, {"B", 1}};
  double scale = 1;
  for (const char* prefix : {"K", "M", "G", "T"}) {
    scale *= 1024;
    for (const std::string& letter : {std::string(prefix), std::string(1, static_cast<char>(std::tolower(*prefix)))})
      for (const char* suffix : {"", "B", "iB"}) units.emplace_back(letter + suffix, scale);
  }
  const std::optional<double> bytes = scaled_number(text, units);
  if (!bytes || *bytes < 1 || *bytes > 1.8e19 || (*bytes < 1024 && *bytes != std::floor(*bytes)))
    throw UserError(flag + " \"" + text + "\" is not a size (a positive number with K, M, G or T: 500G, 1.5T)");
  return static_cast<uint64_t>(*bytes);
}

}  // namespace pf::cli
