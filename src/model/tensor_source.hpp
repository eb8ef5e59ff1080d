// Where weights come from: a Hugging Face checkpoint directory or the seeded synthetic
// generator. Both answer the same questions so the loader cannot tell them apart.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config.hpp"

namespace pf::model {

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;  // Hugging Face orientation: linear weights are [out, in]
};

// Every tensor a model of this config has, in Hugging Face names and shapes.
std::vector<TensorSpec> expected_tensors(const ModelConfig& config);

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  virtual bool has(const std::string& name) const = 0;
  virtual std::vector<std::string> names() const = 0;  // every tensor it holds
  virtual std::vector<int64_t> shape(const std::string& name) const = 0;
  // Rows [row0, row0+rows) x cols [col0, col0+cols) of the 2-D view ([n] is [n, 1]).
  virtual void read_block(const std::string& name, int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                          float* out) const = 0;
  // Identifies the tensor's values (a checkpoint: a hash of its stored bytes, sampled when
  // large; synthetic: the seed). Ranks compare these to be sure they read the same model.
  virtual uint64_t fingerprint(const std::string& name) const = 0;
  // Checks that the source's own description of its tensors is what it stores (a sharded
  // checkpoint's index against every shard's header); one rank's job (validate_tensors).
  virtual void check_storage() const {}
};

// A directory with config.json and model.safetensors, or shards listed by
// model.safetensors.index.json. Shard files are opened on first use, so a rank only ever
// touches the shards that hold its own tensors (check_storage, on one rank, reads every
// shard's header and closes it again). With FP8 `quantization` (config.json's
// quantization_config), F8_E4M3 weights read back dequantized by their `_scale_inv` blocks.
struct Quantization;  // model/quantization.hpp
std::unique_ptr<TensorSource> open_checkpoint(const std::string& directory, const Quantization& quantization);

// The seeded random model `make-model --preset` writes, generated element by element from
// (seed, tensor name, index) so a rank can produce just its own shard.
std::unique_ptr<TensorSource> make_synthetic_source(const ModelConfig& config, uint64_t seed);
float synthetic_value(uint64_t seed, const std::string& name, int64_t rows_cols_in, int64_t index);

// Checks that every expected tensor is present with the expected shape, and that no layer
// holds a tensor pipefill would not read (a bias its layer does not add would otherwise be
// left out of the sum silently), after the source's check_storage; headers only. Returns, for a warning, what the
// checkpoint holds that pipefill skips as transformers does (layers past num_hidden_layers, tensors outside the layers
// and head); "" when nothing.
std::string validate_tensors(const ModelConfig& config, const TensorSource& source, const std::string& origin);

}  // namespace pf::model
