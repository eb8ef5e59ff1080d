// The KV exporter (kvcache/kv_export.hpp) on its own: chunks queued in order land at their
// offsets of a standard safetensors file whose header says what it is; the file appears under
// its final name only when complete; a damaged or foreign file is not taken as complete; a
// write that cannot happen is the export's error, not a crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

#include "io/fnv1a.hpp"
#include "io/safetensors.hpp"
#include "kvcache/kv_export.hpp"
#include "kvcache/kv_source.hpp"
#include "kvcache/kv_store.hpp"

namespace pf::kv {
namespace {

namespace fs = std::filesystem;

KvExportLayout small_layout(const std::string& dir) {
  KvExportLayout layout;
  layout.dir = dir;
  layout.model_identity = "0123456789abcdef";
  layout.stage = 1;
  layout.tp_rank = 1;
  layout.layer_begin = 2;
  layout.layers = 2;
  layout.total_layers = 4;
  layout.kv_head_begin = 2;
  layout.kv_heads = 2;
  layout.total_kv_heads = 4;
  layout.head_dim = 3;
  return layout;
}

// Value of (layer, head, position, d) in a prompt: distinct everywhere, keys and values apart.
float value_at(int part, int layer, int head, int64_t position, int d) {
  return static_cast<float>(part * 100000 + layer * 10000 + head * 1000 + position * 10 + d);
}

// The rows [pos0, pos0 + count) as the stage loop hands them: [layers][kv_heads][count][head_dim],
// valued by global layer and head (so that another layout's read of them can be checked).
std::vector<float> chunk_rows(const KvExportLayout& l, int part, int64_t pos0, int count) {
  std::vector<float> rows;
  for (int layer = 0; layer < l.layers; ++layer)
    for (int head = 0; head < l.kv_heads; ++head)
      for (int64_t p = pos0; p < pos0 + count; ++p)
        for (int d = 0; d < l.head_dim; ++d)
          rows.push_back(value_at(part, l.layer_begin + layer, l.kv_head_begin + head, p, d));
  return rows;
}

// Reads rows [pos0, pos0 + count) of `need`'s layers and heads from `source` and checks they
// are the values chunk_rows wrote.
void expect_rows_read(KvSource& source, const KvExportLayout& need, int64_t pos0, int count) {
  const size_t floats = static_cast<size_t>(need.layers) * need.kv_heads * count * need.head_dim;
  std::vector<float> keys(floats), values(floats);
  source.read(pos0, count, keys.data(), values.data());
  EXPECT_EQ(keys, chunk_rows(need, 0, pos0, count));
  EXPECT_EQ(values, chunk_rows(need, 1, pos0, count));
}

// Files under `dir` whose name says they are unfinished ("NAME.partial.PID").
int partial_files(const fs::path& dir) {
  int count = 0;
  if (fs::exists(dir))
    for (const auto& entry : fs::recursive_directory_iterator(dir))
      count += entry.path().filename().string().find(".partial") != std::string::npos;
  return count;
}

class KvExport : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pipefill_kv_export_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(KvExport, ChunksLandAtTheirPlacesInAStandardFile) {
  const KvExportLayout layout = small_layout(dir_.string());
  const int64_t tokens = 10;
  {
    KvExporter exporter(layout, {5, tokens}, {11, 22});
    exporter.add_chunk(1, 0, 4, chunk_rows(layout, 0, 0, 4), chunk_rows(layout, 1, 0, 4), false);
    const fs::path final_path = dir_ / kv_file_name(1, 1, 1);
    exporter.add_chunk(1, 4, 6, chunk_rows(layout, 0, 4, 6), chunk_rows(layout, 1, 4, 6), true);
    EXPECT_FALSE(exporter.finish().has_value());
    EXPECT_EQ(exporter.completed_prompts(), std::vector<int>{1});
  }
  const std::string path = (dir_ / kv_file_name(1, 1, 1)).string();
  EXPECT_EQ(kv_file_name(1, 1, 1), "prompt-000001/stage01_tp01.safetensors");
  EXPECT_EQ(partial_files(dir_), 0);
  const io::SafetensorsFile file(path);
  auto metadata = file.metadata(), expected = kv_file_metadata(layout, 1, tokens, 22);
  EXPECT_NE(metadata.at("data_checksum"), kUnsetChecksum);  // set before the file got its name
  metadata.erase("data_checksum");
  expected.erase("data_checksum");
  EXPECT_EQ(metadata, expected);
  EXPECT_EQ(file.metadata().at("layers"), "2,4");
  EXPECT_EQ(file.metadata().at("kv_heads"), "2,4");
  ASSERT_EQ(file.tensors().size(), 4u);
  for (int layer = 0; layer < 2; ++layer)
    for (int part = 0; part < 2; ++part) {
      const std::string name = "layers." + std::to_string(2 + layer) + (part == 0 ? ".key" : ".value");
      const io::TensorInfo& info = file.info(name);
      EXPECT_EQ(info.shape, (std::vector<int64_t>{2, tokens, 3}));
      std::vector<float> data(info.numel());
      file.read_block(name, 0, info.rows(), 0, info.cols(), data.data());
      size_t i = 0;
      for (int head = 0; head < 2; ++head)
        for (int64_t p = 0; p < tokens; ++p)
          for (int d = 0; d < 3; ++d) ASSERT_EQ(data[i++], value_at(part, 2 + layer, 2 + head, p, d)) << name;
    }
  EXPECT_TRUE(kv_file_complete(layout, 1, tokens, 22));
  EXPECT_FALSE(kv_file_complete(layout, 1, tokens, 23)) << "other tokens";
  KvExportLayout other = layout;
  other.model_identity = "fedcba9876543210";
  EXPECT_FALSE(kv_file_complete(other, 1, tokens, 22)) << "another model";
  EXPECT_FALSE(kv_file_complete(layout, 0, 5, 11)) << "never written";
  // One value changed in place (a bad sector, a stray write): the checksum names it.
  {
    std::fstream bytes(path, std::ios::in | std::ios::out | std::ios::binary);
    bytes.seekp(static_cast<std::streamoff>(file.info("layers.3.value").file_begin + 17));
    bytes.put('\x5a');
  }
  const auto problem = kv_file_problem(path, kv_file_metadata(layout, 1, tokens, 22));
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("checksum"), std::string::npos) << *problem;
  fs::resize_file(path, fs::file_size(path) - 4);
  EXPECT_FALSE(kv_file_complete(layout, 1, tokens, 22)) << "truncated";
}

TEST_F(KvExport, AnUnfinishedPromptLeavesNoFileAndAFailedWriteIsTheError) {
  const KvExportLayout layout = small_layout(dir_.string());
  {
    KvExporter exporter(layout, {8}, {1});
    exporter.add_chunk(0, 0, 4, chunk_rows(layout, 0, 0, 4), chunk_rows(layout, 1, 0, 4), false);
    EXPECT_FALSE(exporter.finish().has_value());  // a stopped run: the prompt never finished
  }
  EXPECT_FALSE(fs::exists(dir_ / kv_file_name(0, 1, 1)));
  EXPECT_EQ(partial_files(dir_), 0);

  fs::remove_all(dir_);
  fs::create_directories(dir_);
  std::ofstream(dir_ / "prompt-000000") << "a file where the prompt's directory should be";
  KvExporter exporter(layout, {8}, {1});
  exporter.add_chunk(0, 0, 8, chunk_rows(layout, 0, 0, 8), chunk_rows(layout, 1, 0, 8), true);
  const std::optional<std::string> error = exporter.finish();
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->find("cannot write " + (dir_ / kv_file_name(0, 1, 1)).string() + ".partial"), std::string::npos)
      << *error;
  EXPECT_TRUE(exporter.completed_prompts().empty());
}

// The KV store reads a prefix of a checked file: the rows it loads are hashed again against the
// check's per-position sums, so a file written to in place after its check is caught, not loaded.
TEST_F(KvExport, StoreRowsReadAfterTheCheckMustBeTheRowsChecked) {
  const KvExportLayout layout = small_layout(dir_.string());
  const int64_t tokens = 10;
  {
    KvExporter exporter(layout, {5, tokens}, {11, 22});
    exporter.add_chunk(1, 0, 10, chunk_rows(layout, 0, 0, 10), chunk_rows(layout, 1, 0, 10), true);
    ASSERT_FALSE(exporter.finish().has_value());
  }
  const std::string path = (dir_ / kv_file_name(1, 1, 1)).string();
  const KvSourceFiles files{(dir_ / kv_prompt_dir_name(1)).string(), 1, tokens, 22, -1, {}};
  std::string problem;
  std::unique_ptr<KvSource> source = KvSource::open(layout, files, &problem);
  ASSERT_TRUE(source) << problem;
  EXPECT_TRUE(source->same_layout());
  expect_rows_read(*source, layout, 3, 4);
  const size_t floats = static_cast<size_t>(layout.layers) * layout.kv_heads * 4 * layout.head_dim;
  std::vector<float> keys(floats), values(floats);
  {  // position 5 of layer 3's keys, head 1, changed in place
    const io::SafetensorsFile file(path);
    std::fstream bytes(path, std::ios::in | std::ios::out | std::ios::binary);
    bytes.seekp(static_cast<std::streamoff>(file.info("layers.3.key").file_begin + (1 * tokens + 5) * 3 * 4));
    bytes.put('\x33');
  }
  source->read(0, 4, keys.data(), values.data());  // positions 0..3 are intact
  EXPECT_THROW(source->read(3, 4, keys.data(), values.data()), std::runtime_error);
  EXPECT_FALSE(KvSource::open(layout, files, &problem)) << "a damaged file is not opened";
  EXPECT_NE(problem.find("checksum"), std::string::npos) << problem;
}

// Any layout reads any layout's files: a prompt written by 2 stages x 2 TP ranks (layers
// {0,1} and {2,3}, heads {0,1} and {2,3}) is read by a rank holding layers 1..2 and heads 1..2
// (neither stage nor TP rank lines up), by one holding everything, and refused, naming what
// is missing, when a file is gone.
TEST_F(KvExport, AnyLayoutReadsTheRowsItNeedsFromAnotherLayoutsFiles) {
  const int64_t tokens = 7;
  for (int stage = 0; stage < 2; ++stage)
    for (int tp_rank = 0; tp_rank < 2; ++tp_rank) {
      KvExportLayout wrote = small_layout(dir_.string());
      wrote.stage = stage;
      wrote.tp_rank = tp_rank;
      wrote.layer_begin = 2 * stage;
      wrote.kv_head_begin = 2 * tp_rank;
      KvExporter exporter(wrote, {tokens}, {33});
      exporter.add_chunk(0, 0, 3, chunk_rows(wrote, 0, 0, 3), chunk_rows(wrote, 1, 0, 3), false);
      exporter.add_chunk(0, 3, 4, chunk_rows(wrote, 0, 3, 4), chunk_rows(wrote, 1, 3, 4), true);
      ASSERT_FALSE(exporter.finish().has_value());
    }
  const KvSourceFiles files{(dir_ / kv_prompt_dir_name(0)).string(), 0, tokens, 33, -1, {}};
  KvExportLayout across = small_layout(dir_.string());
  across.stage = 0;
  across.tp_rank = 0;
  across.layer_begin = 1;
  across.kv_head_begin = 1;
  KvExportLayout whole = across;
  whole.layer_begin = whole.kv_head_begin = 0;
  whole.layers = whole.kv_heads = 4;
  for (const KvExportLayout& need : {across, whole}) {
    std::string problem;
    std::unique_ptr<KvSource> source = KvSource::open(need, files, &problem);
    ASSERT_TRUE(source) << problem;
    EXPECT_FALSE(source->same_layout());
    expect_rows_read(*source, need, 2, 5);
  }
  fs::remove(dir_ / kv_file_name(0, 1, 0));  // layers 2..3, heads 0..1
  std::string problem;
  EXPECT_FALSE(KvSource::open(across, files, &problem));
  EXPECT_NE(problem.find("holds layer 2's KV head 1"), std::string::npos) << problem;
}

// A stored prompt whose first 4 rows another entry holds: its file begins at position 4, and a
// read across the boundary takes rows from both, each checked.
TEST_F(KvExport, AChainOfEntriesIsReadAcrossItsBoundary) {
  const KvExportLayout layout = small_layout(dir_.string());
  KvExportLayout parent = layout, child = layout;
  parent.dir = (dir_ / "parent").string();
  child.dir = (dir_ / "child").string();
  {
    KvExporter whole(parent, {9}, {5});
    whole.add_chunk(0, 0, 9, chunk_rows(layout, 0, 0, 9), chunk_rows(layout, 1, 0, 9), true);
    ASSERT_FALSE(whole.finish().has_value());
    KvExporter own(child, {8}, {6}, KvFileMode::kExport, {4});  // rows [0, 4) are the parent's
    own.add_chunk(0, 0, 6, chunk_rows(layout, 0, 0, 6), chunk_rows(layout, 1, 0, 6), false);
    own.add_chunk(0, 6, 2, chunk_rows(layout, 0, 6, 2), chunk_rows(layout, 1, 6, 2), true);
    ASSERT_FALSE(own.finish().has_value());
  }
  const io::SafetensorsFile file((dir_ / "child" / kv_file_name(0, 1, 1)).string());
  EXPECT_EQ(file.metadata().at("first_position"), "4");
  EXPECT_EQ(file.info("layers.2.key").shape, (std::vector<int64_t>{2, 4, 3}));
  const std::vector<KvSourceFiles> chain = {{(dir_ / "parent" / kv_prompt_dir_name(0)).string(), 0, 9, 5, -1, {}, 0},
                                            {(dir_ / "child" / kv_prompt_dir_name(0)).string(), 0, 8, 6, -1, {}, 4}};
  std::string problem;
  std::unique_ptr<KvSource> source = KvSource::open(layout, chain, &problem);
  ASSERT_TRUE(source) << problem;
  expect_rows_read(*source, layout, 1, 6);  // rows 1..3 from the parent, 4..6 from the child
}

}  // namespace
}  // namespace pf::kv

namespace pf::kv {
namespace {

// Checkpoint mode (pipeline/checkpoint_run.hpp): the file has its final name from the first
// chunk, a sync reports rows and checksum that kv_rows_problem verifies on disk, a later
// writer continues the same file from there, and the writer never removes it.
TEST_F(KvExport, ACheckpointFileIsSyncedAndContinuedInPlace) {
  const KvExportLayout layout = small_layout(dir_.string());
  const int64_t tokens = 12;
  const fs::path path = dir_ / kv_file_name(1, 1, 1);
  const auto expected = kv_file_metadata(layout, 1, tokens, 22);
  KvFileState first;
  {
    KvExporter writer(layout, {5, tokens}, {11, 22}, KvFileMode::kCheckpoint);
    writer.add_chunk(1, 0, 4, chunk_rows(layout, 0, 0, 4), chunk_rows(layout, 1, 0, 4), false);
    const std::optional<KvSyncResult> synced = writer.sync_result(writer.request_sync(), /*wait=*/true);
    ASSERT_TRUE(synced.has_value());
    EXPECT_FALSE(synced->error.has_value());
    ASSERT_EQ(synced->files.size(), 1u);
    first = synced->files[0];
    EXPECT_EQ(first.prompt, 1);
    EXPECT_EQ(first.rows, 4);
    EXPECT_TRUE(fs::exists(path)) << "a checkpoint's file has its final name from the start";
    EXPECT_FALSE(kv_rows_problem(path.string(), expected, 4, first.checksum).has_value());
    EXPECT_TRUE(kv_rows_problem(path.string(), expected, 4, first.checksum + 1).has_value());
    writer.add_chunk(1, 4, 2, chunk_rows(layout, 0, 4, 2), chunk_rows(layout, 1, 4, 2), false);
    EXPECT_FALSE(writer.finish().has_value());
  }
  EXPECT_TRUE(fs::exists(path)) << "a stopped checkpoint writer removed its file";
  EXPECT_EQ(partial_files(dir_), 0);
  // Rows past the synced ones do not change what the first sync vouches for.
  EXPECT_FALSE(kv_rows_problem(path.string(), expected, 4, first.checksum).has_value());
  {
    KvExporter writer(layout, {5, tokens}, {11, 22}, KvFileMode::kCheckpoint);
    writer.continue_file(1, 4, first.checksum);
    writer.add_chunk(1, 4, 8, chunk_rows(layout, 0, 4, 8), chunk_rows(layout, 1, 4, 8), false);
    const std::optional<KvSyncResult> synced = writer.sync_result(writer.request_sync(), true);
    ASSERT_TRUE(synced && !synced->error && synced->files.size() == 1u);
    EXPECT_EQ(synced->files[0].rows, tokens);
    EXPECT_FALSE(kv_rows_problem(path.string(), expected, tokens, synced->files[0].checksum).has_value());
    EXPECT_FALSE(writer.finish().has_value());
  }
  // Every row is where a fresh export would have put it.
  const io::SafetensorsFile file(path.string());
  std::vector<float> row(3);
  file.read_block("layers.3.value", 1, 1, 9 * 3, 3, row.data());  // head 1, position 9
  EXPECT_EQ(row[2], value_at(1, 3, 3, 9, 2));
}

TEST_F(KvExport, ACheckpointFileOfAnotherLayoutIsNotContinued) {
  KvExportLayout layout = small_layout(dir_.string());
  {
    KvExporter writer(layout, {5, 12}, {11, 22}, KvFileMode::kCheckpoint);
    writer.add_chunk(1, 0, 4, chunk_rows(layout, 0, 0, 4), chunk_rows(layout, 1, 0, 4), false);
    EXPECT_FALSE(writer.finish().has_value());
  }
  layout.model_identity = "fedcba9876543210";  // another model: another header
  KvExporter writer(layout, {5, 12}, {11, 22}, KvFileMode::kCheckpoint);
  writer.continue_file(1, 4, 0);
  const std::optional<KvSyncResult> synced = writer.sync_result(writer.request_sync(), true);
  ASSERT_TRUE(synced.has_value());
  ASSERT_TRUE(synced->error.has_value());
  EXPECT_NE(synced->error->find("not the file this run would write"), std::string::npos) << *synced->error;
  EXPECT_TRUE(synced->files.empty());
}

}  // namespace
}  // namespace pf::kv

#include <sys/wait.h>

#include <chrono>
#include <thread>

namespace pf::kv {
namespace {

// A store entry of `bytes` bytes, built on `parent` ("": none), marked used now; each a distinct
// time after the one before.
void make_used_entry(const fs::path& dir, const std::string& name, size_t bytes, const std::string& parent) {
  fs::create_directories(dir / name);
  std::ofstream(dir / name / "data.bin") << std::string(bytes, 'x');
  std::ofstream(dir / name / "index.json") << (parent.empty() ? "{}" : "{\"parent\": \"" + parent + "\"}");
  EXPECT_TRUE(EntryUse::take((dir / name).string()).has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// A store entry's name for a test label (eviction only ever touches names of that form).
static std::string E(const std::string& label) {
  return "0123456789abcdef-" + io::Fnv1a().add(label).hex() + "-1000";
}

// --kv-store-limit: least recently used entries go first, never one in `keep` nor one another
// process holds in use (a child process takes the lock, as another run would).
TEST_F(KvExport, EvictionRemovesTheLeastRecentlyUsedEntriesNotInUse) {
  fs::create_directories(dir_);
  auto make_entry = [&](const std::string& name, size_t bytes) { make_used_entry(dir_, name, bytes, ""); };
  make_entry(E("a"), 1000);  // oldest
  make_entry(E("b"), 1000);
  make_entry(E("c"), 1000);
  make_entry(E("d"), 1000);                                           // newest
  EXPECT_TRUE(EntryUse::take((dir_ / E("a")).string()).has_value());  // a used again: now the newest

  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  if (child == 0) {  // another run, using b until killed
    std::optional<EntryUse> use = EntryUse::take((dir_ / E("b")).string());
    const char byte = use ? 1 : 0;
    if (::write(ready[1], &byte, 1) != 1) ::_exit(1);
    ::pause();
    ::_exit(0);
  }
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ASSERT_EQ(byte, 1) << "the child could not take its lock";
  // Taking it marked b used now; the other run has held it since long before the rest.
  fs::last_write_time(dir_ / E("b") / "in_use", fs::file_time_type::clock::now() - std::chrono::hours(1));

  // Least recently used first: b, c, d, a. Down to two entries' worth: b is in use (passed
  // over), c goes, d is kept, and a goes too, since three entries are still over the limit.
  const Eviction eviction = evict_to_limit(dir_.string(), 2 * 1010, {E("d")});
  EXPECT_EQ(eviction.in_use, 1);
  EXPECT_EQ(eviction.evicted, (std::vector<std::string>{E("c"), E("a")}));
  EXPECT_TRUE(fs::exists(dir_ / E("b"))) << "an entry in use was removed";
  EXPECT_TRUE(fs::exists(dir_ / E("d"))) << "a kept entry was removed";
  EXPECT_FALSE(fs::exists(dir_ / E("c")));
  EXPECT_LE(eviction.bytes_after, 2 * 1010u + 100);

  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  // The other run has ended: b can go now, least recently used of those left.
  const Eviction later = evict_to_limit(dir_.string(), 1010, {E("d")});
  EXPECT_EQ(later.evicted, std::vector<std::string>{E("b")});
  EXPECT_EQ(later.in_use, 0);
  for (const auto& item : fs::directory_iterator(dir_))
    EXPECT_NE(item.path().filename().string().rfind(".evicting", 0), 0u) << "left " << item.path();
}

// An entry built on another (a question after a stored document) goes with it: evicting the
// document evicts its questions too, and not at all while one of them is in use.
TEST_F(KvExport, EvictionTakesTheEntriesBuiltOnAnEntryWithIt) {
  fs::create_directories(dir_);
  auto make_entry = [&](const std::string& name, const std::string& parent) {
    make_used_entry(dir_, name, 1000, parent);
  };
  make_entry(E("doc"), "");  // least recently used
  make_entry(E("other"), "");
  make_entry(E("q1"), E("doc"));
  make_entry(E("q2"), E("q1"));
  {  // q2 in use: the document cannot go (its chain would break under the run using q2)
    std::optional<EntryUse> use = EntryUse::take((dir_ / E("q2")).string());
    ASSERT_TRUE(use.has_value());
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t child = ::fork();
    if (child == 0) {
      std::optional<EntryUse> held = EntryUse::take((dir_ / E("q2")).string());
      const char byte = held ? 1 : 0;
      if (::write(ready[1], &byte, 1) != 1) ::_exit(1);
      ::pause();
      ::_exit(0);
    }
    char byte = 0;
    ASSERT_EQ(::read(ready[0], &byte, 1), 1);
    ASSERT_EQ(byte, 1);
    const Eviction blocked = evict_to_limit(dir_.string(), 2 * 1010, {});
    EXPECT_EQ(blocked.in_use, 3) << "doc, q1 and q2 each found in use through q2";
    EXPECT_EQ(blocked.evicted, std::vector<std::string>{E("other")});
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
  }
  const Eviction eviction = evict_to_limit(dir_.string(), 100, {});
  EXPECT_EQ(eviction.evicted, (std::vector<std::string>{E("q2"), E("q1"), E("doc")})) << "children first";
  EXPECT_TRUE(fs::is_empty(dir_));
}

// Children used less recently than their parent (the usual order: using a child touches the
// whole chain) go first, and the parent after them in the same pass.
TEST_F(KvExport, EvictionRemovesAParentAfterItsOlderChildren) {
  fs::create_directories(dir_);
  auto make_entry = [&](const std::string& name, const std::string& parent) {
    make_used_entry(dir_, name, 1000, parent);
  };
  make_entry(E("q1"), E("doc"));
  make_entry(E("q2"), E("doc"));
  make_entry(E("doc"), "");
  const Eviction eviction = evict_to_limit(dir_.string(), 100, {});
  EXPECT_EQ(eviction.in_use, 0);
  EXPECT_EQ(eviction.evicted, (std::vector<std::string>{E("q1"), E("q2"), E("doc")}));
  EXPECT_TRUE(fs::is_empty(dir_));
}

// A chain whose parent holds its own rows only from a position at or past its child's first is
// refused (its rows would come twice or from nowhere), and so is one whose parent is gone.
TEST_F(KvExport, StoreChainsMustBeginBeforeTheirChildren) {
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6, 7, 8};
  auto make_entry = [&](int64_t tokens, const std::string& parent, int64_t first) {
    const uint64_t hash = io::Fnv1a().add(ids.data(), tokens * sizeof(int32_t)).value;
    const std::string name = store_entry_name("k", hash, tokens);
    fs::create_directories(dir_ / name);
    std::ofstream(dir_ / name / "tokens.i32", std::ios::binary)
        .write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(tokens * sizeof(int32_t)));
    nlohmann::json index = {{"prompts", {{"0", {{"tokens", tokens}, {"tokens_fnv1a", tokens_hash_text(hash)}}}}}};
    if (!parent.empty()) index.update({{"parent", parent}, {"parent_tokens", first}});
    std::ofstream(dir_ / name / "index.json") << index.dump();
    return name;
  };
  const std::string root = make_entry(8, "", 0);
  const std::string middle = make_entry(7, root, 5);
  make_entry(6, middle, 5);  // begins where its parent's own rows begin: refused
  std::vector<UnusableEntry> unusable;
  std::vector<StoreEntry> listed = list_store_entries(dir_.string(), "k", &unusable);
  ASSERT_EQ(listed.size(), 2u);
  ASSERT_EQ(unusable.size(), 1u);
  EXPECT_NE(unusable[0].reason.find("holds its own rows only from position 5"), std::string::npos)
      << unusable[0].reason;
  for (const StoreEntry& entry : listed)
    if (entry.parent == root) {
      ASSERT_EQ(entry.segments.size(), 2u);
      EXPECT_EQ(entry.segments[1].first_position, 5);
    }
  fs::remove_all(dir_ / root);
  listed = list_store_entries(dir_.string(), "k", &unusable);
  EXPECT_TRUE(listed.empty()) << "entries whose chain lost its root";
}

}  // namespace
}  // namespace pf::kv

#include "kvcache/entry_scores.hpp"

namespace pf::kv {
namespace {

// A stored prompt's token rows are checked when read, not only when the entry is chosen: a
// scores.bin changed in between (in place, during a run) is an error, never a copied wrong row.
TEST_F(KvExport, StoredScoresChangedAfterTheCheckAreRefusedWhenRead) {
  const int64_t tokens = 40000;  // scores.bin over several checked pieces (kScoresCheckBytes)
  const ScoresLayout layout{true, 2, false, {}, {}};
  const std::string prompt_dir = (dir_ / "prompt-000000").string();
  fs::create_directories(prompt_dir);
  write_entry_scores(prompt_dir, tokens, layout, [](int64_t at, int count, const io::TokenRowsOut& rows) {
    for (int r = 0; r < count; ++r) {
      rows.logprobs[r] = -0.001f * static_cast<float>(at + r);
      for (int j = 0; j < 2; ++j) {
        rows.topk_logprobs[2 * r + j] = -1.0f - j;
        rows.topk_ids[2 * r + j] = static_cast<int32_t>((at + r + j) % 97);
      }
    }
  });
  const std::optional<ScoresLayout> checked = entry_scores(prompt_dir, tokens, /*verify=*/true);
  ASSERT_TRUE(checked.has_value());
  EXPECT_GT(checked->block_fnv1a.size(), 2u);
  io::TokenRowBuffer buffer;
  const io::TokenRowShape shape{true, 1, 0};
  const io::TokenRowsOut rows = buffer.resize(shape, 100);
  read_entry_scores(prompt_dir, tokens, *checked, 30000, 100, shape, rows);
  EXPECT_FLOAT_EQ(rows.logprobs[5], -0.001f * 30005);
  EXPECT_EQ(rows.topk_ids[5], (30005 % 97));
  // Rows across a piece's end (bytes 65520..65552 of the log-probs), and the file's last rows
  // (the top-k ids end the file, in its short last piece).
  read_entry_scores(prompt_dir, tokens, *checked, 16380, 8, shape, rows);
  for (int r = 0; r < 8; ++r) EXPECT_FLOAT_EQ(rows.logprobs[r], -0.001f * (16380 + r));
  read_entry_scores(prompt_dir, tokens, *checked, tokens - 100, 100, shape, rows);
  for (int r = 0; r < 100; ++r) EXPECT_EQ(rows.topk_ids[r], (tokens - 100 + r) % 97);
  // One log-prob changed in place (row 30005's), after the check.
  {
    std::fstream file(prompt_dir + "/scores.bin", std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(4 * 30005);
    const float changed = 1.0f;
    file.write(reinterpret_cast<const char*>(&changed), sizeof changed);
  }
  try {
    read_entry_scores(prompt_dir, tokens, *checked, 30000, 100, shape, rows);
    FAIL() << "a changed row was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("changed after they were checked"), std::string::npos) << e.what();
  }
  // Rows in pieces the change did not touch still read.
  read_entry_scores(prompt_dir, tokens, *checked, 0, 100, shape, rows);
  EXPECT_FLOAT_EQ(rows.logprobs[7], -0.007f);
  // And a check now finds the file no longer matches its checksum.
  EXPECT_FALSE(entry_scores(prompt_dir, tokens, /*verify=*/true).has_value());
}

}  // namespace
}  // namespace pf::kv
