// Digests of loaded weight blocks and their layout-free combination (see weights_digest.hpp).
#include "model/weights_digest.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>
#include <stdexcept>

#include "errors.hpp"
#include "io/fnv1a.hpp"

namespace pf::model {

namespace {

// splitmix64's finaliser: a bijection of 64 bits with full avalanche.
inline uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// One element's term. The index and the tensor's salt pick a position-dependent key, xored
// with the value's bits (a bijection of them) before the bijective mix: for a given index
// distinct values give distinct terms, so no single change can leave the sum as it was.
inline uint64_t term(uint64_t salt, uint64_t index, uint32_t bits) {
  return mix(salt ^ (index * 0x9e3779b97f4a7c15ull) ^ bits);
}

bool inside(const BlockDigest& inner, const BlockDigest& outer) {
  return inner.row0 >= outer.row0 && inner.row0 + inner.rows <= outer.row0 + outer.rows && inner.col0 >= outer.col0 &&
         inner.col0 + inner.cols <= outer.col0 + outer.cols;
}

bool overlap(const BlockDigest& a, const BlockDigest& b) {
  return a.row0 < b.row0 + b.rows && b.row0 < a.row0 + a.rows && a.col0 < b.col0 + b.cols && b.col0 < a.col0 + a.cols;
}

std::string region_text(const BlockDigest& b) {
  return "rows " + std::to_string(b.row0) + "-" + std::to_string(b.row0 + b.rows) + ", cols " + std::to_string(b.col0) +
         "-" + std::to_string(b.col0 + b.cols);
}

}  // namespace

BlockDigest digest_block(const std::string& tensor, int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                         int64_t tensor_cols, const float* values) {
  BlockDigest block{tensor, row0, rows, col0, cols, 0};
  const uint64_t salt = mix(io::Fnv1a().add(tensor).value);
  uint64_t sum = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = values + r * cols;
    const uint64_t first = static_cast<uint64_t>(row0 + r) * static_cast<uint64_t>(tensor_cols) + col0;
    for (int64_t c = 0; c < cols; ++c) {
      uint32_t bits;
      std::memcpy(&bits, row + c, sizeof(bits));
      sum += term(salt, first + static_cast<uint64_t>(c), bits);
    }
  }
  block.sum = sum;
  return block;
}

std::string serialize(const std::vector<BlockDigest>& blocks) {
  std::string text;
  for (const auto& b : blocks)
    text += b.tensor + " " + std::to_string(b.row0) + " " + std::to_string(b.rows) + " " + std::to_string(b.col0) +
            " " + std::to_string(b.cols) + " " + std::to_string(b.sum) + "\n";
  return text;
}

std::vector<BlockDigest> deserialize_digests(const std::string& text) {
  std::vector<BlockDigest> blocks;
  std::istringstream in(text);
  BlockDigest b;
  while (in >> b.tensor >> b.row0 >> b.rows >> b.col0 >> b.cols >> b.sum) blocks.push_back(b);
  return blocks;
}

std::string combine_digests(const std::vector<BlockDigest>& blocks, const std::vector<TensorSpec>& expected) {
  std::map<std::string, std::vector<const BlockDigest*>> by_tensor;
  for (const auto& b : blocks) by_tensor[b.tensor].push_back(&b);
  for (const auto& [name, read] : by_tensor)  // a value read is a value the identity covers
    if (std::none_of(expected.begin(), expected.end(), [&](const TensorSpec& spec) { return spec.name == name; }))
      throw std::logic_error("weights digest: a rank read " + name + ", which the model's tensor list lacks");
  io::Fnv1a identity;
  for (const auto& spec : expected) {
    std::vector<const BlockDigest*>& read = by_tensor[spec.name];
    // Largest first, so a block inside another meets its container before it is kept.
    std::stable_sort(read.begin(), read.end(),
                     [](const BlockDigest* a, const BlockDigest* b) { return a->rows * a->cols > b->rows * b->cols; });
    std::vector<const BlockDigest*> kept;
    uint64_t sum = 0;
    int64_t covered = 0;
    for (const BlockDigest* block : read) {
      bool counted = false;
      for (const BlockDigest* held : kept) {
        const bool same_region = block->row0 == held->row0 && block->rows == held->rows && block->col0 == held->col0 &&
                                 block->cols == held->cols;
        if (same_region && block->sum != held->sum)
          throw UserError("two ranks read other values for " + spec.name + " (" + region_text(*block) +
                          "): is the checkpoint the same on every node?");
        if (inside(*block, *held)) {
          counted = true;
          break;
        }
        if (overlap(*block, *held))
          throw std::logic_error("weights digest: two ranks read overlapping blocks of " + spec.name + " (" +
                                 region_text(*block) + " and " + region_text(*held) + ")");
      }
      if (counted) continue;
      kept.push_back(block);
      sum += block->sum;
      covered += block->rows * block->cols;
    }
    int64_t numel = 1;
    for (int64_t d : spec.shape) numel *= d;
    if (covered != numel)
      throw std::logic_error("weights digest: the ranks read " + std::to_string(covered) + " of the " +
                             std::to_string(numel) + " values of " + spec.name);
    identity.add(spec.name).add_value(sum);
    for (int64_t d : spec.shape) identity.add_value(d);
  }
  return identity.hex();
}

}  // namespace pf::model
