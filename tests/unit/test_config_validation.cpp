// config.json read strictly: every rejected class of value throws UserError naming the file
// and the field; transformers 5 `rope_parameters` is read and wins over the top-level keys;
// the cost model's reader (model::shape_from_json) holds the fields it shares to the same rules.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>

#include "errors.hpp"
#include "model/config.hpp"
#include "model/model_shape.hpp"
#include "model/presets.hpp"

using namespace pf;
using namespace pf::model;

namespace {

// The tiny preset as a config.json: Llama, llama3 rope_scaling, legacy layout.
nlohmann::json tiny_json() {
  return to_json(preset_config("tiny"));
}

// A transformers-5 Llama config: no top-level rope keys.
nlohmann::json transformers5_json(const nlohmann::json& rope_parameters) {
  nlohmann::json j = tiny_json();
  j.erase("rope_theta");
  j.erase("rope_scaling");
  j["rope_parameters"] = rope_parameters;
  return j;
}

// Runs `read` and requires a UserError whose message names the origin and the field.
template <typename Read>
void expect_field_error(Read read, const std::string& field, const std::string& also = "") {
  try {
    read();
    ADD_FAILURE() << "no error for field " << field;
  } catch (const UserError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("cfg.json: "), std::string::npos) << message;
    EXPECT_NE(message.find("field \"" + field + "\""), std::string::npos) << message;
    if (!also.empty()) {
      EXPECT_NE(message.find(also), std::string::npos) << message;
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a UserError for field " << field << ": " << e.what();
  }
}

void expect_config_error(const nlohmann::json& j, const std::string& field, const std::string& also = "") {
  expect_field_error([&] { parse_config(j, "cfg.json"); }, field, also);
}

// `j` with one top-level field replaced.
nlohmann::json with(nlohmann::json j, const std::string& key, const nlohmann::json& value) {
  j[key] = value;
  return j;
}

nlohmann::json with_scaling(const std::string& key, const nlohmann::json& value) {
  nlohmann::json j = tiny_json();
  j["rope_scaling"][key] = value;
  return j;
}

}  // namespace

TEST(ConfigValidation, OptionalFieldsOfTheWrongTypeAreUserErrors) {
  const nlohmann::json j = tiny_json();
  expect_config_error(with(j, "tie_word_embeddings", "yes"), "tie_word_embeddings",
                      "must be true or false (got \"yes\")");
  expect_config_error(with(j, "attention_bias", 1), "attention_bias");
  expect_config_error(with(j, "rms_norm_eps", "1e-5"), "rms_norm_eps");
  expect_config_error(with(j, "rope_theta", "1e4"), "rope_theta");
  expect_config_error(with(j, "num_key_value_heads", "2"), "num_key_value_heads");
  expect_config_error(with(j, "max_position_embeddings", true), "max_position_embeddings");
  expect_config_error(with(j, "head_dim", nlohmann::json::array({32})), "head_dim");
  expect_config_error(with_scaling("factor", "8"), "rope_scaling.factor");
}

TEST(ConfigValidation, IntegersBeyondIntAreNotTruncated) {
  const nlohmann::json j = tiny_json();
  // 2^32 + 128 would read as 128 through a narrowing get<int>.
  expect_config_error(with(j, "hidden_size", (1LL << 32) + 128), "hidden_size", "(got 4294967424)");
  expect_config_error(with(j, "num_hidden_layers", (1LL << 32) + 8), "num_hidden_layers");
  expect_config_error(with(j, "vocab_size", std::numeric_limits<unsigned long long>::max()), "vocab_size");
  expect_config_error(with(j, "intermediate_size", -(1LL << 32) + 256), "intermediate_size");
}

TEST(ConfigValidation, FractionalIntegersAreRefused) {
  const nlohmann::json j = tiny_json();
  expect_config_error(with(j, "hidden_size", 128.5), "hidden_size", "must be an integer");
  expect_config_error(with(j, "num_attention_heads", 4.0), "num_attention_heads");  // transformers writes ints
}

TEST(ConfigValidation, SizesBelowTheirMinimum) {
  const nlohmann::json j = tiny_json();
  expect_config_error(with(j, "max_position_embeddings", -5), "max_position_embeddings", "(got -5)");
  expect_config_error(with(j, "max_position_embeddings", 0), "max_position_embeddings");
  expect_config_error(with(j, "num_key_value_heads", 0), "num_key_value_heads");
  expect_config_error(with(j, "hidden_size", 0), "hidden_size");
  expect_config_error(with(j, "head_dim", -32), "head_dim");
}

TEST(ConfigValidation, AbsurdSizesAreCapped) {
  const nlohmann::json j = tiny_json();
  expect_config_error(with(j, "hidden_size", field::kMaxWidth + 1), "hidden_size");
  expect_config_error(with(j, "vocab_size", field::kMaxVocab + 1), "vocab_size");
  expect_config_error(with(j, "num_hidden_layers", field::kMaxCount + 1), "num_hidden_layers");
  // Each within its own cap, the product (the q projection's width) is not.
  nlohmann::json wide = with(with(j, "head_dim", 1 << 15), "num_attention_heads", 1024);
  wide["num_key_value_heads"] = 1024;
  expect_config_error(wide, "num_attention_heads", "times head_dim");
}

TEST(ConfigValidation, HeadDimAbsentNeedsHeadsToDivideHidden) {
  nlohmann::json j = tiny_json();
  j.erase("head_dim");
  EXPECT_EQ(parse_config(j, "cfg.json").head_dim, 32);
  expect_config_error(with(j, "hidden_size", 130), "hidden_size", "num_attention_heads");
}

TEST(ConfigValidation, RopeScalingMustBeAnObject) {
  expect_config_error(with(tiny_json(), "rope_scaling", "llama3"), "rope_scaling", "must be an object");
  expect_config_error(transformers5_json(nlohmann::json::array()), "rope_parameters");
  nlohmann::json j = tiny_json();
  j["rope_scaling"] = nullptr;  // null is absent: plain RoPE
  EXPECT_FALSE(parse_config(j, "cfg.json").rope_scaling.llama3);
}

TEST(ConfigValidation, ValuesThatMakeNaNAreRefused) {
  const nlohmann::json j = tiny_json();
  expect_config_error(with(j, "rope_theta", 0), "rope_theta", "must be a finite number > 0 (got 0)");
  expect_config_error(with(j, "rope_theta", -10000.0), "rope_theta");
  expect_config_error(with(j, "rope_theta", std::numeric_limits<double>::infinity()), "rope_theta");
  expect_config_error(with(j, "rms_norm_eps", -1e-5), "rms_norm_eps", "> 0 and < 1");
  expect_config_error(with(j, "rms_norm_eps", 0.0), "rms_norm_eps");
  expect_config_error(with(j, "rms_norm_eps", 1.5), "rms_norm_eps");
  expect_config_error(with_scaling("factor", 0), "rope_scaling.factor");
  expect_config_error(with_scaling("low_freq_factor", 0.0), "rope_scaling.low_freq_factor");
  // high == low: the smoothing divides by their difference.
  expect_config_error(with_scaling("high_freq_factor", 1.0), "rope_scaling.high_freq_factor", "low_freq_factor (1)");
  expect_config_error(with_scaling("original_max_position_embeddings", -256),
                      "rope_scaling.original_max_position_embeddings");
  nlohmann::json missing = tiny_json();
  missing["rope_scaling"].erase("factor");
  expect_field_error([&] { parse_config(missing, "cfg.json"); }, "rope_scaling.factor");
  expect_config_error(transformers5_json({{"rope_type", "llama3"},
                                          {"rope_theta", 500000.0},
                                          {"factor", 0.0},
                                          {"low_freq_factor", 1.0},
                                          {"high_freq_factor", 4.0},
                                          {"original_max_position_embeddings", 64}}),
                      "rope_parameters.factor");
}

TEST(ConfigValidation, UnknownRopeTypesAreRefusedNamingTheField) {
  for (const char* type : {"linear", "dynamic", "longrope"}) {
    expect_config_error(transformers5_json({{"rope_type", type}, {"rope_theta", 10000.0}, {"factor", 4.0}}),
                        "rope_parameters.rope_type", "must be \"default\", \"llama3\" or \"yarn\"");
    expect_config_error(with(tiny_json(), "rope_scaling", {{"rope_type", type}, {"factor", 4.0}}),
                        "rope_scaling.rope_type", type);
    expect_config_error(with(tiny_json(), "rope_scaling", {{"type", type}, {"factor", 4.0}}), "rope_scaling.type");
  }
  expect_config_error(transformers5_json({{"rope_type", 3}}), "rope_parameters.rope_type", "must be a string");
}

TEST(ConfigValidation, ValidLegacyConfigsReadExactly) {
  nlohmann::json j = tiny_json();
  j["rope_theta"] = 500000;  // an integer, as transformers writes it
  j["rms_norm_eps"] = 1e-5;
  const ModelConfig c = parse_config(j, "cfg.json");
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_TRUE(c.rope_scaling.llama3);
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 256.0);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  // The legacy "type" key of rope_scaling (transformers < 4.43).
  j["rope_scaling"].erase("rope_type");
  j["rope_scaling"]["type"] = "llama3";
  EXPECT_TRUE(parse_config(j, "cfg.json").rope_scaling.llama3);
  // Absent optional fields keep their defaults.
  for (const char* key : {"rope_theta", "rope_scaling", "rms_norm_eps", "max_position_embeddings"}) j.erase(key);
  const ModelConfig d = parse_config(j, "cfg.json");
  EXPECT_EQ(d.rope_theta, 10000.0);
  EXPECT_EQ(d.rms_norm_eps, 1e-6);
  EXPECT_EQ(d.max_position_embeddings, 1 << 30);
  EXPECT_FALSE(d.rope_scaling.llama3);
}

TEST(ConfigValidation, RopeParametersOfTransformers5AreRead) {
  const ModelConfig plain =
      parse_config(transformers5_json({{"rope_type", "default"}, {"rope_theta", 500000.0}}), "cfg.json");
  EXPECT_EQ(plain.rope_theta, 500000.0);
  EXPECT_FALSE(plain.rope_scaling.llama3);
  const ModelConfig llama3 = parse_config(transformers5_json({{"rope_type", "llama3"},
                                                              {"rope_theta", 250000.0},
                                                              {"factor", 32.0},
                                                              {"low_freq_factor", 2.0},
                                                              {"high_freq_factor", 8.0},
                                                              {"original_max_position_embeddings", 64}}),
                                          "cfg.json");
  EXPECT_EQ(llama3.rope_theta, 250000.0);
  EXPECT_TRUE(llama3.rope_scaling.llama3);
  EXPECT_EQ(llama3.rope_scaling.factor, 32.0);
  EXPECT_EQ(llama3.rope_scaling.low_freq_factor, 2.0);
  EXPECT_EQ(llama3.rope_scaling.high_freq_factor, 8.0);
  EXPECT_EQ(llama3.rope_scaling.original_max_position_embeddings, 64.0);
  // Read back through to_json (legacy layout), the same model.
  const ModelConfig back = parse_config(to_json(llama3), "cfg.json");
  EXPECT_EQ(back.rope_theta, llama3.rope_theta);
  EXPECT_EQ(back.rope_scaling.original_max_position_embeddings, 64.0);
  // Per-layer-type rope objects (Gemma 3 style) are refused, not silently defaulted.
  expect_config_error(transformers5_json({{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e6}}}}),
                      "rope_parameters.full_attention");
}

// What transformers settles that a config.json leaves out or says twice: the pretraining length
// of llama3 / yarn (a top-level original_max_position_embeddings first, then the rope object's,
// then max_position_embeddings), the older "type" key, each family's own defaults, and which
// sliding-window fields each family reads (transformers_check.py checks the numbers).
TEST(ConfigValidation, WhatTransformersSettlesIsReadTheSameWay) {
  nlohmann::json rope = {{"rope_type", "llama3"},  {"rope_theta", 5e5},       {"factor", 8.0},
                         {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
  nlohmann::json j = transformers5_json(rope);
  EXPECT_EQ(parse_config(j, "cfg.json").rope_scaling.original_max_position_embeddings, 64.0);
  j["original_max_position_embeddings"] = 512;
  EXPECT_EQ(parse_config(j, "cfg.json").rope_scaling.original_max_position_embeddings, 512.0);
  j.erase("original_max_position_embeddings");
  j["rope_parameters"].erase("original_max_position_embeddings");
  EXPECT_EQ(parse_config(j, "cfg.json").rope_scaling.original_max_position_embeddings,
            static_cast<double>(j["max_position_embeddings"].get<int>()));
  j["rope_parameters"]["type"] = j["rope_parameters"]["rope_type"];
  j["rope_parameters"].erase("rope_type");
  EXPECT_TRUE(parse_config(j, "cfg.json").rope_scaling.llama3);
  j["rope_parameters"]["partial_rotary_factor"] = 0.5;
  expect_config_error(j, "rope_parameters.partial_rotary_factor", "must be 1");

  nlohmann::json mixtral = tiny_json();  // (no preset is a Mixtral)
  mixtral["architectures"] = {"MixtralForCausalLM"};
  mixtral["model_type"] = "mixtral";
  mixtral["attention_bias"] = false;
  mixtral["num_local_experts"] = 4;
  mixtral["num_experts_per_tok"] = 2;
  mixtral.erase("rope_scaling");
  mixtral.erase("rms_norm_eps");
  mixtral.erase("rope_theta");
  EXPECT_EQ(parse_config(mixtral, "cfg.json").rms_norm_eps, 1e-5);
  EXPECT_EQ(parse_config(mixtral, "cfg.json").rope_theta, 1e6);
  expect_config_error(with(with(mixtral, "sliding_window", 16), "use_sliding_window", false), "sliding_window");
  expect_config_error(with(mixtral, "model_type", "llama"), "model_type", "must be \"mixtral\"");

  nlohmann::json llama = tiny_json();
  EXPECT_EQ(parse_config(with(llama, "sliding_window", 16), "cfg.json").hidden_size, 128);  // Llama reads none
  nlohmann::json qwen = to_json(preset_config("tiny-qwen2"));
  EXPECT_EQ(parse_config(with(qwen, "sliding_window", 16), "cfg.json").hidden_size, qwen["hidden_size"]);
  const nlohmann::json first_layer_windowed = with(qwen, "max_window_layers", 0);
  expect_config_error(with(first_layer_windowed, "use_sliding_window", true), "use_sliding_window",
                      "4096");  // when unsaid
  expect_config_error(with(with(first_layer_windowed, "use_sliding_window", true), "sliding_window", 16),
                      "use_sliding_window");
  EXPECT_EQ(
      parse_config(with(with(qwen, "use_sliding_window", true), "sliding_window", nullptr), "cfg.json").hidden_size,
      qwen["hidden_size"]);

  // Asked for, but on no layer: Qwen2 and Qwen3 window only the layers from max_window_layers
  // (default 28) on, or those their own layer_types marks; that is full attention.
  const int layers = qwen["num_hidden_layers"];
  const nlohmann::json asked = with(with(qwen, "use_sliding_window", true), "sliding_window", 16);
  EXPECT_EQ(parse_config(asked, "cfg.json").num_layers, layers);  // tiny-qwen2 has fewer than 28 layers
  EXPECT_EQ(parse_config(with(asked, "max_window_layers", layers), "cfg.json").num_layers, layers);
  expect_config_error(with(asked, "max_window_layers", layers - 1), "use_sliding_window", "max_window_layers");
  const std::vector<std::string> full(layers, "full_attention");
  EXPECT_EQ(parse_config(with(with(asked, "max_window_layers", 0), "layer_types", full), "cfg.json").num_layers,
            layers);  // the list wins over max_window_layers
  std::vector<std::string> last_sliding = full;
  last_sliding.back() = "sliding_attention";
  expect_config_error(with(asked, "layer_types", last_sliding), "use_sliding_window", "layer_types");
  // A sliding layer listed without use_sliding_window: no window size (transformers fails or
  // windows it at 0 keys).
  expect_config_error(with(qwen, "layer_types", last_sliding), "layer_types", "use_sliding_window is false");
  expect_config_error(with(asked, "layer_types", std::vector<std::string>(layers + 1, "full_attention")), "layer_types",
                      "one type for each");
  expect_config_error(with(asked, "layer_types", std::vector<std::string>(layers, "chunked_attention")), "layer_types",
                      "full_attention");
  std::vector<std::string> legacy = full;
  legacy.front() = "attention";  // transformers' older name for full attention
  EXPECT_EQ(parse_config(with(asked, "layer_types", legacy), "cfg.json").num_layers, layers);
  // A null window is none, unless a listed layer is still sliding (transformers fails there).
  const nlohmann::json asked_null = with(asked, "sliding_window", nullptr);
  EXPECT_EQ(parse_config(with(asked_null, "max_window_layers", 0), "cfg.json").num_layers, layers);
  expect_config_error(with(asked_null, "layer_types", last_sliding), "layer_types", "sliding_window is null");

  // Qwen2-MoE windows the even layers below max_window_layers; Qwen3-MoE every layer.
  nlohmann::json qwen2_moe = to_json(preset_config("tiny-moe"));
  qwen2_moe["architectures"] = {"Qwen2MoeForCausalLM"};
  qwen2_moe["model_type"] = "qwen2_moe";
  qwen2_moe["shared_expert_intermediate_size"] = 0;
  const nlohmann::json moe_asked = with(with(qwen2_moe, "use_sliding_window", true), "sliding_window", 16);
  expect_config_error(moe_asked, "use_sliding_window", "layer 0 (max_window_layers)");
  expect_config_error(with(moe_asked, "sliding_window", nullptr), "sliding_window", "builds a window mask");
  EXPECT_EQ(parse_config(with(moe_asked, "max_window_layers", 0), "cfg.json").num_layers,
            qwen2_moe["num_hidden_layers"].get<int>());
  expect_config_error(with(qwen2_moe, "layer_types",
                           std::vector<std::string>(qwen2_moe["num_hidden_layers"].get<int>(), "sliding_attention")),
                      "layer_types", "use_sliding_window is false");
  nlohmann::json qwen3_moe = qwen2_moe;
  qwen3_moe["architectures"] = {"Qwen3MoeForCausalLM"};
  qwen3_moe["model_type"] = "qwen3_moe";
  expect_config_error(with(with(qwen3_moe, "use_sliding_window", true), "max_window_layers", 0), "use_sliding_window",
                      "every layer");
}

// config.json as Python's json reads it: one value and nothing after it but whitespace (the
// stream operator would stop at the first object and ignore the rest); architectures a list.
TEST(ConfigValidation, AConfigFileIsOneJsonValue) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("pf_cfg_" + std::to_string(::getpid()) + ".json")).string();
  auto read_back = [&](const std::string& text) {
    std::ofstream(path) << text;
    return load_config_file(path);
  };
  const std::string config = tiny_json().dump();
  EXPECT_EQ(read_back(config + "\n\n").hidden_size, 128);
  for (const std::string& tail : {std::string("garbage"), std::string(R"({"hidden_size": 32})"), std::string("}")}) {
    try {
      read_back(config + tail);
      ADD_FAILURE() << "accepted config.json followed by " << tail;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("malformed JSON"), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove(path);
  expect_config_error(with(tiny_json(), "architectures", "LlamaForCausalLM"), "architectures",
                      R"(must be a list of names, e.g. ["LlamaForCausalLM"])");
}

// Both layouts in one config.json: transformers 5.24 takes rope_parameters' theta over a lone
// top-level rope_theta, but the top-level pair when rope_scaling is there too, so pipefill
// refuses any contradiction between them (naming both) and reads them when they agree.
TEST(ConfigValidation, RopeLayoutsThatDisagreeAreRefused) {
  nlohmann::json j = transformers5_json({{"rope_type", "default"}, {"rope_theta", 500000.0}});
  j["rope_theta"] = 10000.0;
  expect_config_error(j, "rope_theta", "rope_parameters.rope_theta");
  j["rope_theta"] = 500000;  // the same value (as an int): no contradiction
  EXPECT_EQ(parse_config(j, "cfg.json").rope_theta, 500000.0);
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 64}};
  expect_config_error(j, "rope_scaling", "rope_parameters");
  j["rope_parameters"].update(j["rope_scaling"]);  // the same scaling in both: read
  const ModelConfig same = parse_config(j, "cfg.json");
  EXPECT_TRUE(same.rope_scaling.llama3);
  EXPECT_EQ(same.rope_scaling.factor, 8.0);
  // With rope_scaling there, transformers drops rope_parameters (its theta too): a theta
  // only rope_parameters gives is a contradiction.
  nlohmann::json no_top_theta = j;
  no_top_theta.erase("rope_theta");
  expect_config_error(no_top_theta, "rope_theta", "(absent) and field \"rope_parameters.rope_theta\" (500000.0)");
  j["rope_parameters"]["factor"] = 4.0;
  expect_config_error(j, "rope_scaling", "rope_parameters");
  // Without a theta of its own, rope_parameters takes the top-level one.
  j.erase("rope_scaling");
  j["rope_parameters"].erase("rope_theta");
  j["rope_theta"] = 750000;
  EXPECT_EQ(parse_config(j, "cfg.json").rope_theta, 750000.0);
}

TEST(ConfigValidation, TiedEmbeddingsCountOnce) {
  ModelConfig tied = preset_config("tiny-qwen2");
  ASSERT_TRUE(tied.tie_word_embeddings);
  ModelConfig untied = tied;
  untied.tie_word_embeddings = false;
  const long long embedding = static_cast<long long>(tied.vocab_size) * tied.hidden_size;
  EXPECT_EQ(untied.total_parameters() - tied.total_parameters(), embedding);
  // The banner's active parameters: layers' matmuls + embedding (+ lm_head when untied).
  const model::ModelShape tied_shape = model::shape_from_config(tied);
  const model::ModelShape untied_shape = model::shape_from_config(untied);
  EXPECT_TRUE(tied_shape.tie_word_embeddings);
  const double h = 128, q = 4 * 32, kv = 2 * 32, inter = 256;
  const double per_layer = h * q + 2 * h * kv + q * h + 3 * h * inter;
  EXPECT_DOUBLE_EQ(tied_shape.active_parameters(), 8 * per_layer + 512 * h);
  EXPECT_DOUBLE_EQ(untied_shape.active_parameters() - tied_shape.active_parameters(), static_cast<double>(embedding));
}

TEST(ConfigValidation, CostModelReaderSharesTheRules) {
  using model::shape_from_json;
  const auto shape_error = [](const nlohmann::json& j, const std::string& field, const std::string& also = "") {
    expect_field_error([&] { shape_from_json(j, "cfg.json"); }, field, also);
  };
  const nlohmann::json j = tiny_json();
  shape_error(with(j, "hidden_size", (1LL << 32) + 128), "hidden_size");
  shape_error(with(j, "num_hidden_layers", 8.5), "num_hidden_layers");
  shape_error(with(j, "max_position_embeddings", -5), "max_position_embeddings");
  shape_error(with(j, "rope_theta", 0), "rope_theta", "> 0");
  shape_error(with(j, "rope_scaling", "llama3"), "rope_scaling");
  shape_error(with_scaling("factor", 0), "rope_scaling.factor");
  shape_error(with(j, "tie_word_embeddings", "yes"), "tie_word_embeddings");
  shape_error(transformers5_json({{"rope_type", "default"}, {"rope_theta", -1.0}}), "rope_parameters.rope_theta");
  nlohmann::json no_head_dim = with(j, "hidden_size", 130);
  no_head_dim.erase("head_dim");
  shape_error(no_head_dim, "hidden_size");
  // Rope types the CPU backend cannot run still count FLOPs; yarn's values follow one rule.
  nlohmann::json longrope = with(j, "rope_scaling", {{"type", "longrope"}, {"factor", 40}});
  EXPECT_EQ(shape_from_json(longrope, "cfg.json").hidden_size, 128);
  EXPECT_THROW(parse_config(longrope, "cfg.json"), UserError);
  nlohmann::json yarn = with(j, "rope_scaling", {{"type", "yarn"}, {"original_max_position_embeddings", 4096}});
  shape_error(yarn, "rope_scaling.factor");  // required, as transformers requires it (null: max / original)
  yarn["rope_scaling"]["factor"] = 40;
  yarn["rope_scaling"]["beta_fast"] = 32;
  EXPECT_EQ(shape_from_json(yarn, "cfg.json").hidden_size, 128);
  EXPECT_TRUE(parse_config(yarn, "cfg.json").rope_scaling.yarn);
  // MoE fields follow the same integer rules.
  nlohmann::json moe = with(with(j, "num_experts", 8), "num_experts_per_tok", 2);
  moe["moe_intermediate_size"] = 64;
  EXPECT_TRUE(shape_from_json(moe, "cfg.json").moe());
  shape_error(with(moe, "num_experts_per_tok", "2"), "num_experts_per_tok");
  shape_error(with(moe, "moe_intermediate_size", 64.5), "moe_intermediate_size");
}
