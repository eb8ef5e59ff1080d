// config.json's quantization_config: how the checkpoint's stored weights relate to the real
// ones. pipefill computes in float32, so a quantized checkpoint is dequantized as it is read
// (model/checkpoint_source.cpp); this only says which scheme, and refuses the ones it can't.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace pf::model {

// Block-quantized FP8 (DeepSeek-V3, Qwen3-*-FP8): a linear weight is stored as F8_E4M3 next
// to `<name>_scale_inv`, one float per block of block_rows x block_cols elements, and
// w[r][c] = fp8(stored[r][c]) * scale_inv[r / block_rows][c / block_cols].
struct Quantization {
  enum class Method { kNone, kFp8Block };
  Method method = Method::kNone;
  int block_rows = 0;  // weight_block_size[0]: along the output dimension (rows)
  int block_cols = 0;  // weight_block_size[1]: along the input dimension (columns)

  bool fp8() const { return method == Method::kFp8Block; }
};

// Reads `quantization_config` of a parsed config.json (absent or null: kNone). Throws
// UserError `<origin>: field "quantization_config.X" ...` for any scheme pipefill cannot
// dequantize exactly: a quant_method other than "fp8", fmt other than "e4m3", a
// weight_block_size that is not two positive integers, static activation scales.
Quantization parse_quantization(const nlohmann::json& config, const std::string& origin);

}  // namespace pf::model
