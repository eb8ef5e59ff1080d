// FNV-1a, 64-bit: the one hash behind every fingerprint pipefill stores (input tokens,
// weights, output rows). Not cryptographic: it detects accidents (a torn write, a rebuilt
// model, another input), not an adversary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace pf::io {

struct Fnv1a {
  uint64_t value = 0xcbf29ce484222325ull;
  Fnv1a& add(const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < bytes; ++i) value = (value ^ p[i]) * 0x100000001b3ull;
    return *this;
  }
  Fnv1a& add(const std::string& text) { return add(text.data(), text.size()); }
  template <typename T>
  Fnv1a& add_value(const T& v) {
    return add(&v, sizeof v);
  }
  std::string hex() const;
};

inline std::string Fnv1a::hex() const {
  static const char* digits = "0123456789abcdef";
  std::string text(16, '0');
  for (int i = 0; i < 16; ++i) text[15 - i] = digits[(value >> (4 * i)) & 15];
  return text;
}

}  // namespace pf::io
