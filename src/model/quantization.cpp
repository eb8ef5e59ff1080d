// quantization_config -> Quantization, through the strict field readers of model/config.hpp
// so its messages read like every other config.json field's.
#include "model/quantization.hpp"

#include "errors.hpp"
#include "model/config.hpp"

namespace pf::model {
namespace {

// One of weight_block_size's two entries: a positive integer no wider than a row may be.
bool is_block_extent(const nlohmann::json& value) {
  if (value.is_number_unsigned()) {
    const auto extent = value.get<unsigned long long>();
    return extent >= 1 && extent <= static_cast<unsigned long long>(field::kMaxWidth);
  }
  return value.is_number_integer() && value.get<long long>() >= 1 && value.get<long long>() <= field::kMaxWidth;
}

}  // namespace

Quantization parse_quantization(const nlohmann::json& config, const std::string& origin) {
  Quantization quantization;
  if (!config.is_object()) return quantization;  // parse_config reports a config that is not an object
  const field::Reader top(config, origin);
  if (!top.object("quantization_config")) return quantization;
  const field::Reader q = top.nested("quantization_config");

  if (!q.has("quant_method")) throw UserError(origin + ": missing field \"" + q.name("quant_method") + "\"");
  const std::string method = q.string_or("quant_method", "");
  if (method != "fp8")
    q.fail(q.name("quant_method"),
           "must be \"fp8\" (block-quantized FP8 e4m3, as DeepSeek-V3 and Qwen3-*-FP8 ship): the only quantization "
           "pipefill dequantizes; GPTQ, AWQ, bitsandbytes, compressed-tensors and the others are not read",
           method);
  // Absent in transformers' own FineGrainedFP8Config; the tensors' dtype (F8_E4M3) is checked anyway.
  const std::string format = q.string_or("fmt", "e4m3");
  if (format != "e4m3")
    q.fail(q.name("fmt"), "must be \"e4m3\", the FP8 format pipefill reads (F8_E4M3 tensors)", format);
  // Static schemes also quantize the activations with stored input scales; pipefill keeps
  // them in float32/bf16, so it would not compute what such a model computes.
  const std::string activations = q.string_or("activation_scheme", "dynamic");
  if (activations != "dynamic")
    q.fail(q.name("activation_scheme"),
           "must be \"dynamic\": pipefill runs activations in float32/bf16 and never quantizes them, so a static "
           "scheme's activation scales could not be applied",
           activations);
  // Required: without it the checkpoint is per-tensor FP8 (a `weight_scale`, not block scales).
  if (!q.has("weight_block_size"))
    throw UserError(origin + ": missing field \"" + q.name("weight_block_size") +
                    "\" (pipefill reads block-quantized FP8, e.g. [128, 128])");
  const nlohmann::json& block = (*top.object("quantization_config"))["weight_block_size"];
  if (!block.is_array() || block.size() != 2 || !is_block_extent(block[0]) || !is_block_extent(block[1]))
    q.fail(q.name("weight_block_size"),
           "must be two positive integers [rows, cols] of at most " + std::to_string(field::kMaxWidth) +
               ", e.g. [128, 128]",
           block);
  quantization.method = Quantization::Method::kFp8Block;
  quantization.block_rows = block[0].get<int>();
  quantization.block_cols = block[1].get<int>();
  return quantization;
}

}  // namespace pf::model
