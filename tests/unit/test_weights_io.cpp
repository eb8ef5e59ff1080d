// Weights: synthetic generation, make-model's checkpoint layout read back shard by shard,
// TP slicing; HDF5 prompt validation.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "cli/commands.hpp"
#include "compute/cpu/thread_pool.hpp"
#include "errors.hpp"
#include "io/fnv1a.hpp"
#include "io/prompts_h5.hpp"
#include "model/model_source.hpp"
#include "model/presets.hpp"
#include "model/weights.hpp"

using namespace pf;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("pf_unit_" + std::to_string(::getpid()) + "_" + name);
  fs::create_directories(dir);
  return dir;
}

int make_model(const std::vector<std::string>& args) {
  std::vector<std::string> all = {"make-model"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  return cli::make_model_command(static_cast<int>(argv.size()), argv.data());
}

}  // namespace

TEST(Synthetic, DeterministicAndSeeded) {
  const auto c = model::preset_config("tiny");
  auto a = model::make_synthetic_source(c, 1), b = model::make_synthetic_source(c, 1),
       other = model::make_synthetic_source(c, 2);
  std::vector<float> x(128), y(128), z(128);
  a->read_block("model.layers.3.mlp.up_proj.weight", 5, 1, 0, 128, x.data());
  b->read_block("model.layers.3.mlp.up_proj.weight", 5, 1, 0, 128, y.data());
  other->read_block("model.layers.3.mlp.up_proj.weight", 5, 1, 0, 128, z.data());
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
  // A slice equals the same elements of the whole tensor.
  std::vector<float> whole(256 * 128), part(3 * 7);
  a->read_block("model.layers.3.mlp.up_proj.weight", 0, 256, 0, 128, whole.data());
  a->read_block("model.layers.3.mlp.up_proj.weight", 10, 3, 20, 7, part.data());
  for (int r = 0; r < 3; ++r)
    for (int col = 0; col < 7; ++col) EXPECT_EQ(part[r * 7 + col], whole[(10 + r) * 128 + 20 + col]);
}

// make-model again into the same directory with fewer shards: refused without --overwrite;
// with it the old shards and index go, so the directory is the new model's (an old index was
// once read instead of the new file). A directory holding a file make-model does not write
// (a real checkpoint's tokenizer, a user's notes) is never replaced. A directory with both a
// single file and an index is refused by the reader.
TEST(Checkpoint, MakeModelAgainLeavesOnlyTheNewModel) {
  const fs::path dir = temp_dir("again");
  ASSERT_EQ(make_model({"--preset", "tiny", "--out", dir.string(), "--seed", "1", "--max-shard-mb", "1"}), 0);
  ASSERT_TRUE(fs::exists(dir / "model.safetensors.index.json"));
  EXPECT_THROW(make_model({"--preset", "tiny", "--out", dir.string(), "--seed", "2"}), UserError);
  std::ofstream(dir / "notes.txt") << "mine\n";
  EXPECT_THROW(make_model({"--preset", "tiny", "--out", dir.string(), "--seed", "2", "--overwrite"}), UserError);
  EXPECT_TRUE(fs::exists(dir / "model.safetensors.index.json"));  // the refusals left it as it was
  fs::remove(dir / "notes.txt");
  ASSERT_EQ(make_model({"--preset", "tiny", "--out", dir.string(), "--seed", "2", "--overwrite"}), 0);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()),
            2);  // config.json, model.safetensors: no old shard, no staging directory left
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));
  // --out as people write it: with a trailing '/', through a link (the target is written), ".".
  ASSERT_EQ(make_model({"--preset", "tiny", "--out", dir.string() + "/", "--seed", "2", "--overwrite"}), 0);
  fs::create_directory_symlink(dir, dir.string() + "_link");
  ASSERT_EQ(make_model({"--preset", "tiny", "--out", dir.string() + "_link", "--seed", "2", "--overwrite"}), 0);
  EXPECT_TRUE(fs::is_symlink(dir.string() + "_link"));
  fs::remove(dir.string() + "_link");
  const fs::path here = fs::current_path();
  fs::current_path(dir);
  EXPECT_EQ(make_model({"--preset", "tiny", "--out", ".", "--seed", "2", "--overwrite"}), 0);
  fs::current_path(here);
  const auto again = model::open_model(dir.string(), 0), seed2 = model::open_model("synthetic:tiny", 2);
  std::vector<float> a(128), b(128);
  again.tensors->read_block("model.layers.0.mlp.up_proj.weight", 0, 1, 0, 128, a.data());
  seed2.tensors->read_block("model.layers.0.mlp.up_proj.weight", 0, 1, 0, 128, b.data());
  EXPECT_EQ(a, b);
  std::ofstream(dir / "model.safetensors.index.json") << R"({"weight_map": {}})";
  try {
    model::open_model(dir.string(), 0);
    FAIL() << "a directory with both weight layouts was read";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("holds both model.safetensors and model.safetensors.index.json"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

TEST(Checkpoint, MakeModelShardedEqualsSynthetic) {
  const fs::path dir = temp_dir("sharded");
  ASSERT_EQ(make_model({"--preset", "tiny-qwen2", "--out", dir.string(), "--seed", "5", "--max-shard-mb", "1"}), 0);
  EXPECT_TRUE(fs::exists(dir / "model.safetensors.index.json"));
  const auto from_disk = model::open_model(dir.string(), 0);
  const auto synthetic = model::open_model("synthetic:tiny-qwen2", 5);
  model::validate_tensors(from_disk.config, *from_disk.tensors, dir.string());
  for (const auto& spec : model::expected_tensors(from_disk.config)) {
    const int64_t rows = spec.shape[0], cols = spec.shape.size() > 1 ? spec.shape[1] : 1;
    std::vector<float> a(rows * cols), b(rows * cols);
    from_disk.tensors->read_block(spec.name, 0, rows, 0, cols, a.data());
    synthetic.tensors->read_block(spec.name, 0, rows, 0, cols, b.data());
    ASSERT_EQ(a, b) << spec.name;
  }
  fs::remove_all(dir);
}

// The index must describe its shards: a tensor a shard holds but the index does not list (a
// tied head whose lm_head.weight was left out of the index) or puts in another shard (a tensor
// in two shards) would be read from where the index says, and transformers reads the shard's.
TEST(Checkpoint, AnIndexThatDoesNotDescribeItsShardsIsRefused) {
  const fs::path dir = temp_dir("stale_index");
  ASSERT_EQ(make_model({"--preset", "tiny-qwen2", "--out", dir.string(), "--max-shard-mb", "1"}), 0);
  const fs::path index_path = dir / "model.safetensors.index.json";
  const nlohmann::json index = nlohmann::json::parse(std::ifstream(index_path));
  std::set<std::string> shards;
  for (const auto& [name, file] : index["weight_map"].items()) shards.insert(file.get<std::string>());
  ASSERT_GE(shards.size(), 2u);
  const std::string moved = index["weight_map"].begin().key();
  const std::string home = index["weight_map"].begin().value(),
                    other = *shards.rbegin() == home ? *shards.begin() : *shards.rbegin();
  auto refused = [&](nlohmann::json edited, const std::string& words) {
    std::ofstream(index_path) << edited.dump();
    try {
      const auto source = model::open_model(dir.string(), 0);
      model::validate_tensors(source.config, *source.tensors, dir.string());
      ADD_FAILURE() << "no error for " << edited.dump();
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  nlohmann::json unlisted = index;
  unlisted["weight_map"].erase(moved);
  refused(unlisted, "holds tensor " + moved + ", which " + index_path.string() + " does not list");
  nlohmann::json elsewhere = index;
  elsewhere["weight_map"][moved] = other;
  refused(elsewhere, "holds tensor " + moved + ", which " + index_path.string() + " puts in " + (dir / other).string());
  nlohmann::json gone = index;
  gone["weight_map"][moved] = "model-00009-of-00009.safetensors";
  refused(gone, "which does not exist");
  std::ofstream(index_path) << index.dump();
  const auto source = model::open_model(dir.string(), 0);
  EXPECT_EQ(model::validate_tensors(source.config, *source.tensors, dir.string()), "");
  fs::remove_all(dir);
}

TEST(Checkpoint, ShapeMismatchIsNamed) {
  const fs::path dir = temp_dir("mismatch");
  ASSERT_EQ(make_model({"--preset", "tiny", "--out", dir.string()}), 0);
  auto config = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  config["intermediate_size"] = 512;
  std::ofstream(dir / "config.json") << config.dump();
  const auto source = model::open_model(dir.string(), 0);
  try {
    model::validate_tensors(source.config, *source.tensors, dir.string());
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(
        std::string(e.what()).find("mlp.gate_proj.weight has shape [256, 128] but config.json implies [512, 128]"),
        std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

namespace {

// The full tensors of a source, and how often each element was found in a shard.
class TileCheck {
 public:
  explicit TileCheck(const model::TensorSource& source) : source_(source) {}

  // The shard block `got` ([rows, cols], row-major) must be rows [row0, row0 + rows) x
  // columns [col0, col0 + cols) of tensor `name`, element for element.
  void block(const std::string& name, const float* got, int64_t row0, int64_t rows, int64_t col0, int64_t cols) {
    Full& full = full_tensor(name);
    ASSERT_LE(row0 + rows, full.rows) << name;
    ASSERT_LE(col0 + cols, full.cols) << name;
    int64_t wrong = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t at = (row0 + r) * full.cols + col0 + c;
        wrong += full.values[at] != got[r * cols + c];
        ++full.seen[at];
      }
    EXPECT_EQ(wrong, 0) << name << " rows " << row0 << "+" << rows << " columns " << col0 << "+" << cols;
  }

  // The shards together hold every element of every tensor checked, each exactly once.
  void expect_tiled() const {
    for (const auto& [name, full] : tensors_) {
      const auto once = std::count(full.seen.begin(), full.seen.end(), 1);
      EXPECT_EQ(once, static_cast<int64_t>(full.seen.size())) << name << ": elements not held exactly once";
    }
  }

 private:
  struct Full {
    int64_t rows = 0, cols = 0;
    std::vector<float> values;
    std::vector<int> seen;
  };
  Full& full_tensor(const std::string& name) {
    auto it = tensors_.find(name);
    if (it != tensors_.end()) return it->second;
    const auto shape = source_.shape(name);
    Full full;
    full.rows = shape.at(0);
    full.cols = shape.size() > 1 ? shape[1] : 1;
    full.values.resize(full.rows * full.cols);
    source_.read_block(name, 0, full.rows, 0, full.cols, full.values.data());
    full.seen.assign(full.values.size(), 0);
    return tensors_.emplace(name, std::move(full)).first->second;
  }

  const model::TensorSource& source_;
  std::map<std::string, Full> tensors_;
};

// Loads layer 2 and the LM head on each of `tp` ranks and checks every sharded matrix
// against the full one. Column parallel (q/k/v, gate/up, the vocabulary): rank r holds rows
// [r n, (r + 1) n) of n = rows / tp; row parallel (o, down): the same range of columns.
void expect_shards_tile(const model::ModelConfig& c, int tp) {
  const auto source = model::make_synthetic_source(c, 0);
  const std::string p = "model.layers.2.";
  const std::string head = c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  const int64_t h = c.hidden_size, q = c.num_heads / tp * c.head_dim, kv = c.num_kv_heads / tp * c.head_dim;
  const int64_t inter = c.intermediate_size / tp;
  TileCheck check(*source);
  int64_t vocab_row = 0;
  for (int r = 0; r < tp; ++r) {
    const auto w = model::load_stage_weights(c, *source, {2, 1}, false, true, model::make_shard_spec(c, tp, r));
    ASSERT_EQ(w.layers.size(), 1u);
    const auto& l = w.layers[0];
    ASSERT_EQ(l.qkv.size(), size_t((q + 2 * kv) * h));
    check.block(p + "self_attn.q_proj.weight", l.qkv.data(), r * q, q, 0, h);
    check.block(p + "self_attn.k_proj.weight", l.qkv.data() + q * h, r * kv, kv, 0, h);
    check.block(p + "self_attn.v_proj.weight", l.qkv.data() + (q + kv) * h, r * kv, kv, 0, h);
    if (c.attention_bias) {
      ASSERT_EQ(l.qkv_bias.size(), size_t(q + 2 * kv));
      check.block(p + "self_attn.q_proj.bias", l.qkv_bias.data(), r * q, q, 0, 1);
      check.block(p + "self_attn.k_proj.bias", l.qkv_bias.data() + q, r * kv, kv, 0, 1);
      check.block(p + "self_attn.v_proj.bias", l.qkv_bias.data() + q + kv, r * kv, kv, 0, 1);
    }
    ASSERT_EQ(l.o.size(), size_t(h * q));
    check.block(p + "self_attn.o_proj.weight", l.o.data(), 0, h, r * q, q);
    ASSERT_EQ(l.gate_up.size(), size_t(2 * inter * h));
    check.block(p + "mlp.gate_proj.weight", l.gate_up.data(), r * inter, inter, 0, h);
    check.block(p + "mlp.up_proj.weight", l.gate_up.data() + inter * h, r * inter, inter, 0, h);
    ASSERT_EQ(l.down.size(), size_t(h * inter));
    check.block(p + "mlp.down_proj.weight", l.down.data(), 0, h, r * inter, inter);
    // The vocabulary in rank order, the remainder of V / tp on the first ranks.
    const int64_t vocab_rows = c.vocab_size / tp + (r < c.vocab_size % tp ? 1 : 0);
    ASSERT_EQ(w.lm_head.size(), size_t(vocab_rows * h));
    check.block(head, w.lm_head.data(), vocab_row, vocab_rows, 0, h);
    vocab_row += vocab_rows;
  }
  check.expect_tiled();
}

}  // namespace

TEST(Weights, TensorParallelShardsTileTheFullMatrices) {
  const auto c = model::preset_config("tiny");
  expect_shards_tile(c, 2);
  // Biases sharded with their rows, a tied LM head, a vocabulary that does not divide by tp.
  auto qwen2 = model::preset_config("tiny-qwen2");
  qwen2.vocab_size = 511;
  expect_shards_tile(qwen2, 2);
  const auto odd = model::make_shard_spec(qwen2, 2, 1);
  EXPECT_EQ(odd.vocab_begin, 256);
  EXPECT_EQ(odd.vocab_count, 255);
  EXPECT_THROW(model::validate_tensor_parallel(model::shape_from_config(c), 4), UserError);  // 2 KV heads
  EXPECT_NO_THROW(model::validate_tensor_parallel(model::shape_from_config(c), 2));
}

namespace {

// Writes an input with arbitrary datasets for the validation tests.
std::string write_input(const std::string& name, const std::vector<int64_t>& tokens,
                        const std::vector<int64_t>& offsets, hid_t token_type = H5T_STD_I32LE,
                        bool with_offsets = true) {
  const std::string path = (temp_dir("inputs") / name).string();
  hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  auto write = [&](const char* dataset_name, hid_t type, const std::vector<int64_t>& data) {
    hsize_t n = data.size();
    hid_t space = H5Screate_simple(1, &n, nullptr);
    hid_t dataset = H5Dcreate2(file, dataset_name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (n) H5Dwrite(dataset, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data());
    H5Dclose(dataset);
    H5Sclose(space);
  };
  write("tokens", token_type, tokens);
  if (with_offsets) write("offsets", H5T_STD_I64LE, offsets);
  H5Fclose(file);
  return path;
}

void expect_input_error(const std::string& path, const std::string& fragment) {
  try {
    io::read_prompts(path, 100);
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(PromptsH5, ValidInputRoundTrips) {
  io::PromptSet p;
  p.tokens = {1, 2, 3, 4, 5};
  p.offsets = {0, 2, 5};
  const std::string path = (temp_dir("inputs") / "good.h5").string();
  io::write_prompts(path, p);
  const auto back = io::read_prompts(path, 100);
  EXPECT_EQ(back.tokens, p.tokens);
  EXPECT_EQ(back.lengths(), (std::vector<int64_t>{2, 3}));
}

// The optional datasets: each prompt's scored span and its id come back as written, they
// enter the fingerprint (so --resume tells the inputs apart), and an input without them keeps
// the fingerprint it had before they existed.
TEST(PromptsH5, SpansAndIdsRoundTripAndEnterTheFingerprint) {
  io::PromptSet p;
  p.tokens = {1, 2, 3, 4, 5};
  p.offsets = {0, 2, 5};
  const uint64_t plain = io::fingerprint(p);
  EXPECT_EQ(plain, io::Fnv1a().add(p.tokens.data(), 20).add(p.offsets.data(), 24).value);
  p.score_start = {1, 2};
  p.ids = {"first", "zweite ü"};
  const std::string path = (temp_dir("inputs") / "spans.h5").string();
  io::write_prompts(path, p);
  const io::PromptSet back = io::read_prompts_isolated(path, 100);
  EXPECT_EQ(back.tokens, p.tokens);
  EXPECT_EQ(back.score_start, p.score_start);
  EXPECT_EQ(back.ids, p.ids);
  EXPECT_EQ(back.first_scored(1), 2);
  EXPECT_NE(io::fingerprint(back), plain);
  io::PromptSet other_ids = back;
  other_ids.ids = {"firstz", "weite ü"};  // the same bytes run together: another input
  EXPECT_NE(io::fingerprint(other_ids), io::fingerprint(back));
}

TEST(PromptsH5, BadSpansAndIdsAreNamed) {
  io::PromptSet p;
  p.tokens = {1, 2, 3, 4, 5};
  p.offsets = {0, 2, 5};
  const auto input = [&](const char* name, std::vector<int64_t> starts, std::vector<std::string> ids) {
    io::PromptSet q = p;
    q.score_start = std::move(starts);
    q.ids = std::move(ids);
    const std::string path = (temp_dir("inputs") / name).string();
    io::write_prompts(path, q);
    return path;
  };
  expect_input_error(input("zero.h5", {0, 1}, {}), "/score_start of prompt 0 is 0");
  expect_input_error(input("at_end.h5", {1, 3}, {}), "/score_start of prompt 1 is 3");
  expect_input_error(input("short.h5", {1}, {}), "/score_start holds 1 entries for 2 prompts");
  expect_input_error(input("ids.h5", {}, {"a", "b", "c"}), "/ids holds 3 strings for 2 prompts");
}

// /ids as C writers and h5py's ascii dtype store them (the ASCII character set) read as they
// are; bytes that are not UTF-8 are refused (the output declares its /ids UTF-8).
TEST(PromptsH5, IdsInEitherCharacterSetAndOnlyUtf8) {
  const auto input = [](const char* name, std::vector<std::string> ids) {
    io::PromptSet p;
    p.tokens = {1, 2, 3};
    p.offsets = {0, 1, 3};
    const std::string path = (temp_dir("inputs") / name).string();
    io::write_prompts(path, p);
    hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);  // the default character set: ASCII
    const hsize_t n = ids.size();
    hid_t space = H5Screate_simple(1, &n, nullptr);
    hid_t dataset = H5Dcreate2(file, "ids", type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    std::vector<const char*> text;
    for (const std::string& id : ids) text.push_back(id.c_str());
    H5Dwrite(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data());
    H5Dclose(dataset);
    H5Sclose(space);
    H5Tclose(type);
    H5Fclose(file);
    return path;
  };
  EXPECT_EQ(io::read_prompts(input("ascii.h5", {"a-1", "b-2"}), 100).ids, (std::vector<std::string>{"a-1", "b-2"}));
  expect_input_error(input("latin1.h5", {"ok", "caf\xe9"}), "/ids: string 1 is not valid UTF-8");
}

TEST(PromptsH5, EveryBadInputIsNamed) {
  expect_input_error(write_input("no_offsets.h5", {1, 2}, {}, H5T_STD_I32LE, false), "/offsets is missing");
  expect_input_error(write_input("float_tokens.h5", {1, 2}, {0, 2}, H5T_IEEE_F32LE), "must hold integers");
  expect_input_error(write_input("start.h5", {1, 2}, {1, 2}), "must start at 0");
  expect_input_error(write_input("empty.h5", {1, 2}, {0, 0, 2}), "prompt 0 is empty");
  expect_input_error(write_input("decreasing.h5", {1, 2, 3}, {0, 2, 1, 3}), "must increase");
  expect_input_error(write_input("past.h5", {1, 2}, {0, 3}), "past the end");
  expect_input_error(write_input("vocab.h5", {1, 100}, {0, 2}), "outside the vocabulary");
  expect_input_error(write_input("negative.h5", {1, -1}, {0, 2}), "outside the vocabulary");
  expect_input_error(write_input("one_offset.h5", {1}, {0}), "at least 2 entries");
  // A value out of the 32-bit range: refused as such, not clamped to 2^31 - 1 (then "outside
  // the vocabulary" with a number the file does not hold).
  expect_input_error(write_input("wide.h5", {1, int64_t{1} << 40}, {0, 2}, H5T_STD_I64LE),
                     "/tokens cannot be read as 32-bit signed integers (a value outside their range");
  const std::string not_h5 = (temp_dir("inputs") / "text.h5").string();
  std::ofstream(not_h5) << "hello";
  expect_input_error(not_h5, "not an HDF5 file");
  expect_input_error("/nonexistent/in.h5", "cannot read");
}

// The loader reads large slices in bands on the rank's threads: the same values and the same
// digests (the weights' identity, which resume compares) as one thread; and a layer sink gets
// the same layers, in order, that StageWeights::layers would hold.
TEST(Weights, ThreadsAndLayerSinkLoadTheSameWeights) {
  model::ModelConfig c = model::preset_config("small");  // hidden 1024, GQA 16/8 of 64
  c.num_layers = 2;
  c.intermediate_size = 1024;
  c.vocab_size = 1024;  // tensors of 0.5-2 Mi values: several bands each
  const auto source = model::make_synthetic_source(c, 3);
  const auto shard = model::make_shard_spec(c, 1, 0);
  auto load = [&](int threads, const model::LayerSink& sink) {
    cpu::ThreadPool::instance().set_threads(threads);
    auto w = model::load_stage_weights(c, *source, {0, 2}, true, false, shard, sink);
    cpu::ThreadPool::instance().set_threads(1);
    return w;
  };
  const auto one = load(1, {});
  std::vector<model::LayerWeights> taken;
  const auto three = load(3, [&](model::LayerWeights&& layer) { taken.push_back(std::move(layer)); });
  EXPECT_TRUE(three.layers.empty());
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(three.embedding, one.embedding);
  for (size_t l = 0; l < 2; ++l) {
    EXPECT_EQ(taken[l].qkv, one.layers[l].qkv) << l;
    EXPECT_EQ(taken[l].gate_up, one.layers[l].gate_up) << l;
    EXPECT_EQ(taken[l].down, one.layers[l].down) << l;
  }
  ASSERT_EQ(three.record.digests.size(), one.record.digests.size());
  for (size_t i = 0; i < one.record.digests.size(); ++i) {
    EXPECT_EQ(three.record.digests[i].tensor, one.record.digests[i].tensor);
    EXPECT_EQ(three.record.digests[i].sum, one.record.digests[i].sum) << one.record.digests[i].tensor;
  }
}
