// The conversion of a flag's text to its type, stricter than cxxopts' own ("0.5x" is not a
// number, 2^40 is not an int) and with messages that say what was wrong. CheckedValue<T>
// plugs it into cxxopts; option_table.cpp adds the flag's name to the message.
#pragma once

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cxxopts.hpp>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "errors.hpp"

namespace pf::cli {

// A flag's text that does not convert to the flag's type. Thrown by CheckedValue while
// cxxopts parses; the parse in option_table.cpp adds the flag it was given to (cxxopts' own
// exception names only the text). A UserError, so that it still reads sensibly if it ever
// escapes elsewhere.
struct InvalidValue : UserError {
  InvalidValue(std::string text_, std::string element_, std::string problem_)
      : UserError("\"" + element_ + "\" " + problem_),
        text(std::move(text_)),
        element(std::move(element_)),
        problem(std::move(problem_)) {}
  std::string text;     // the whole value given
  std::string element;  // the list element that failed (the whole value for a scalar)
  std::string problem;  // "is not a valid integer", ...
};

// Each convert returns "" or what is wrong with the text.
template <typename T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
std::string convert(const std::string& text, T& out) {
  try {
    cxxopts::values::parse_value(text, out);
    return "";
  } catch (const cxxopts::exceptions::incorrect_argument_type&) {
  }
  if constexpr (std::is_same_v<T, bool>) {
    return "is not true or false";
  } else {
    const bool negative = !text.empty() && text[0] == '-';
    const std::string digits = text.substr(negative ? 1 : 0);
    const bool integer = !digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos;
    const std::string range = "an integer from " + std::to_string(std::numeric_limits<T>::min()) + " to " +
                              std::to_string(std::numeric_limits<T>::max());
    if (integer) return "is out of range (" + range + ")";
    return std::is_signed_v<T> ? "is not a valid integer" : "is not a valid non-negative integer";
  }
}
// Stricter than cxxopts' stream parse, which takes "0.5x" as 0.5.
inline std::string convert(const std::string& text, double& out) {
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) || end != text.c_str() + text.size())
    return "is not a valid number";
  if (!std::isfinite(out)) return "is not a finite number";
  return "";
}

inline std::string convert(const std::string& text, std::string& out) {
  out = text;
  return "";
}

template <typename T>
void store(const std::string& text, T& target) {
  T value{};
  const std::string problem = convert(text, value);
  if (!problem.empty()) throw InvalidValue(text, text, problem);
  target = value;
}

// A list flag takes comma-separated elements and may be repeated: each occurrence appends.
template <typename T>
void store(const std::string& text, std::vector<T>& target) {
  std::vector<T> values;
  for (size_t begin = 0;;) {
    const size_t comma = text.find(',', begin);
    const std::string element = text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    T value{};
    const std::string problem = convert(element, value);
    if (!problem.empty()) throw InvalidValue(text, element, problem);
    values.push_back(value);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  target.insert(target.end(), values.begin(), values.end());
}

// cxxopts' value with our conversions and messages. A subclass of standard_value<T>, so
// ParseResult::as<T>() finds it as usual.
template <typename T>
class CheckedValue final : public cxxopts::values::standard_value<T> {
 public:
  void parse(const std::string& text) const override { store(text, *this->m_store); }
  std::shared_ptr<cxxopts::Value> clone() const override { return std::make_shared<CheckedValue<T>>(*this); }
};

}  // namespace pf::cli
