// The weights' identity: a digest of every value each rank loads, computed as it loads them,
// and combined on rank 0 into one value that does not depend on the layout (pp, tp, expert
// split) that read them. It is what --resume, --save-kv and --kv-store compare to know that a
// file was made by this model (docs/formats.md, "The weights' identity").
//
// A block's digest is a sum over its elements of a mix of (tensor, element index, value bits):
// sums over disjoint blocks add up to the tensor's, whoever read which block. Changing any one
// value always changes the sum (the mix is a bijection of the value for a given index).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/tensor_source.hpp"

namespace pf::model {

// Rows [row0, row0 + rows) x cols [col0, col0 + cols) of a tensor's 2-D view, and its digest.
struct BlockDigest {
  std::string tensor;
  int64_t row0 = 0, rows = 0, col0 = 0, cols = 0;
  uint64_t sum = 0;
};

// The digest of `values` (rows x cols, row-major) read at (row0, col0) of `tensor`, whose
// 2-D view has `tensor_cols` columns.
BlockDigest digest_block(const std::string& tensor, int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                         int64_t tensor_cols, const float* values);

// One line a block, and back (what ranks send rank 0).
std::string serialize(const std::vector<BlockDigest>& blocks);
std::vector<BlockDigest> deserialize_digests(const std::string& text);

// Rank 0: the identity of the model from every rank's blocks. Blocks read by several ranks
// (replicated tensors) count once; a block inside another (a tied LM head's vocabulary slice
// of the embedding) adds nothing. UserError when two ranks read the same block and got other
// values (a node with another checkpoint); std::logic_error when the blocks overlap otherwise
// or leave part of an expected tensor unread (the identity would not cover it: a bug).
std::string combine_digests(const std::vector<BlockDigest>& blocks, const std::vector<TensorSpec>& expected);

}  // namespace pf::model
