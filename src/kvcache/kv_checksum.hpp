// The data checksum of a KV export file (metadata "data_checksum"): a sum over every row of
// every tensor (one head's head_dim values at one position) of a hash of the row's stored
// bytes mixed with the tensor's name, the head and the position. A sum, so the writer thread
// can add rows in the order chunks arrive and a reader can recompute it in any order; the
// mix, so rows swapped between positions, heads or tensors change it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace pf::kv {

inline uint64_t mix64(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A hash of `bytes` bytes (a multiple of 2), eight at a time.
inline uint64_t row_hash(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 0x9e3779b97f4a7c15ull ^ bytes;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t word;
    std::memcpy(&word, p + i, 8);
    h = mix64(h ^ word);
  }
  for (; i < bytes; ++i) h = mix64(h ^ p[i]);
  return h;
}

inline uint64_t name_hash(const std::string& name) {
  return row_hash(name.data(), name.size());
}

// One row's term of the checksum.
inline uint64_t checksum_term(uint64_t tensor_name_hash, int head, int64_t position, uint64_t row) {
  return mix64(row ^ mix64(tensor_name_hash + static_cast<uint64_t>(head) * 0x100000001b3ull +
                           static_cast<uint64_t>(position) * 0x9e3779b97f4a7c15ull));
}

}  // namespace pf::kv
