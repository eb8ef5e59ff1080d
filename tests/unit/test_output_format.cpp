// The output format declared once (io/output_format.hpp): the docs' table is the one rendered
// from the declaration, and a file ResultWriter creates holds exactly the declared datasets,
// with their types and shapes, reopens for --resume, and gains a dataset the format added
// later instead of being refused.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "io/h5_handle.hpp"
#include "io/output_format.hpp"
#include "io/results_h5.hpp"
#include "io/stored_output.hpp"

namespace pf::io {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(OutputFormat, DocsTableIsTheDeclaredOne) {
  const std::string docs = read_text(std::string(PIPEFILL_SOURCE_DIR) + "/docs/formats.md");
  const std::string begin = "<!-- output datasets: begin -->\n", end = "<!-- output datasets: end -->";
  const size_t a = docs.find(begin), b = docs.find(end);
  ASSERT_NE(a, std::string::npos) << "docs/formats.md lacks the marker " << begin;
  ASSERT_NE(b, std::string::npos) << "docs/formats.md lacks the marker " << end;
  EXPECT_EQ(docs.substr(a + begin.size(), b - a - begin.size()), output_format_table())
      << "docs/formats.md's output table differs from src/io/output_format.cpp; put this between the markers:\n"
      << output_format_table();
}

// The layout left the run identity (any layout resumes any output): a partial output written
// when it was in still resumes, and any other key in the stored identity alone still differs.
TEST(OutputFormat, AnOutputWrittenUnderAnotherLayoutResumes) {
  const nlohmann::json now = {{"model", "m"}, {"chunk_size", 64}};
  nlohmann::json before = now;
  before["pp"] = 2;
  before["tp"] = 1;
  before["layer_partition"] = "4,4";
  EXPECT_FALSE(identity_difference(before, now).has_value());
  before["logprobs"] = true;
  EXPECT_EQ(identity_difference(before, now).value_or(""), "logprobs (true, this run: none)");
  EXPECT_EQ(identity_difference(now, {{"model", "m"}, {"chunk_size", 32}}).value_or(""),
            "chunk_size (64, this run: 32)");
}

TEST(OutputFormat, EveryDatasetIsDeclaredOnceInOrder) {
  const auto& sets = output_datasets();
  for (int i = 0; i < kNumDatasets; ++i) {
    EXPECT_EQ(static_cast<int>(sets[i].id), i) << sets[i].name;
    for (int j = 0; j < i; ++j) EXPECT_STRNE(sets[i].name, sets[j].name);
  }
}

class OutputFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("pf_output_format_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "out.h5").string();
    layout_.num_prompts = 2;
    layout_.vocab_size = 5;
    layout_.hidden_size = 3;
    layout_.token_logprobs = true;
    layout_.top_k = 2;
    layout_.prompt_offsets = {0, 3, 5};
    layout_.tokens = &tokens_;
    layout_.ids = {"first", "second ü"};
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Prompt 0 stored: its three token rows, then its row.
  void store_first_prompt(ResultWriter& writer) {
    const float logprobs[3] = {NAN, -1.5f, -0.25f}, topk_logprobs[6] = {-0.1f, -2, -0.2f, -3, -0.3f, -4};
    const int32_t topk_ids[6] = {1, 2, 3, 4, 0, 1};
    writer.write_token_rows(0, 0, 3, {logprobs, topk_logprobs, topk_ids, nullptr});
    const float row[5] = {1, 2, 3, 4, 5}, hidden[3] = {0.5f, -0.5f, 1};
    writer.write_prompt(0, row, hidden, 0.125);
  }

  // One dataset of the partial file, whole.
  void read_partial(Dataset id, hid_t type, void* out) {
    H5Handle file{H5Fopen((path_ + ".partial").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose};
    H5Handle set{H5Dopen2(file.id, dataset_spec(id).name, H5P_DEFAULT), H5Dclose};
    ASSERT_GE(H5Dread(set.id, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out), 0);
  }

  std::filesystem::path dir_;
  std::string path_;
  OutputLayout layout_;
  // Prompt 0's tokens 1 and 3 are its rows' top-1 (is_greedy 1); prompt 1's token 2 is not.
  const std::vector<int32_t> tokens_ = {4, 1, 3, 2, 2};
  const nlohmann::json identity_ = {{"model", "m"}, {"chunk_size", 64}};
};

TEST_F(OutputFileTest, HoldsTheDeclaredDatasetsAndResumes) {
  {
    ResultWriter writer(path_, layout_, identity_, false, 0);
    store_first_prompt(writer);
  }  // a stopped run: the partial file stays
  const std::string partial = path_ + ".partial";
  {
    H5Handle file{H5Fopen(partial.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose};
    ASSERT_GE(file.id, 0);
    for (const DatasetSpec& spec : output_datasets()) {
      const bool expected = spec.initial != Initial::kAtFinish && present_in(spec, layout_);
      ASSERT_EQ(H5Lexists(file.id, spec.name, H5P_DEFAULT) > 0, expected) << spec.name;
      if (!expected) continue;
      H5Handle set{H5Dopen2(file.id, spec.name, H5P_DEFAULT), H5Dclose};
      H5Handle type{H5Dget_type(set.id), H5Tclose}, space{H5Dget_space(set.id), H5Sclose};
      EXPECT_EQ(H5Tget_class(type.id), type_class(spec.element)) << spec.name;
      EXPECT_EQ(H5Tget_size(type.id), element_size(spec.element)) << spec.name;
      std::vector<hsize_t> dims(H5Sget_simple_extent_ndims(space.id));
      H5Sget_simple_extent_dims(space.id, dims.data(), nullptr);
      EXPECT_EQ(dims, dataset_dims(spec, layout_)) << spec.name;
    }
  }
  {
    unsigned char greedy[2] = {9, 9};
    int64_t starts[2] = {0, 0};
    double nll[2] = {0, 0};
    read_partial(Dataset::kIsGreedy, H5T_NATIVE_UCHAR, greedy);
    read_partial(Dataset::kScoreStart, H5T_NATIVE_INT64, starts);
    read_partial(Dataset::kNllSum, H5T_NATIVE_DOUBLE, nll);
    EXPECT_EQ(greedy[0], 1);  // prompt 1 not stored yet: 0
    EXPECT_EQ(greedy[1], 0);
    EXPECT_EQ(starts[0], 1);  // an input without /score_start: every prompt from 1
    EXPECT_EQ(starts[1], 1);
    EXPECT_DOUBLE_EQ(nll[0], 1.75);
  }
  {
    ResultWriter writer(path_, layout_, identity_, true, 0);
    EXPECT_TRUE(writer.resumed());
    EXPECT_EQ(writer.completed(), (std::vector<char>{1, 0}));
    EXPECT_TRUE(writer.torn_rows().empty());
  }
}

// A partial file begun before /is_greedy existed never stored its finished prompts' flag:
// they are computed again (stale), and a complete one is refused with what to do.
TEST_F(OutputFileTest, APartialWithoutIsGreedyComputesItsPromptsAgain) {
  {
    ResultWriter writer(path_, layout_, identity_, false, 0);
    store_first_prompt(writer);
  }
  const std::string partial = path_ + ".partial";
  {
    H5Handle file{H5Fopen(partial.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose};
    ASSERT_GE(H5Ldelete(file.id, dataset_spec(Dataset::kIsGreedy).name, H5P_DEFAULT), 0);
  }
  ResultWriter writer(path_, layout_, identity_, true, 0);
  EXPECT_EQ(writer.completed(), (std::vector<char>{0, 0}));
  EXPECT_EQ(writer.stale_rows(), (std::vector<int>{0}));
}

// A prompt scored from position 2: its NLL, perplexity and is_greedy cover positions 2.. only,
// and /score_start says so.
TEST_F(OutputFileTest, AScoredSpanCountsOnlyItsTokens) {
  layout_.score_start = {2, 1};
  {
    ResultWriter writer(path_, layout_, identity_, false, 0);
    // Row 0 (predicting position 1, unscored) was never computed: NaN and -1; row 1's top-1 is
    // 3 = token 2, the span's only token.
    const float logprobs[3] = {NAN, NAN, -0.25f}, topk_logprobs[6] = {NAN, NAN, -0.2f, -3, -0.3f, -4};
    const int32_t topk_ids[6] = {-1, -1, 3, 4, 0, 1};
    writer.write_token_rows(0, 0, 3, {logprobs, topk_logprobs, topk_ids, nullptr});
    const float row[5] = {1, 2, 3, 4, 5}, hidden[3] = {0.5f, -0.5f, 1};
    writer.write_prompt(0, row, hidden, 0.125);
    EXPECT_EQ(writer.scored_tokens(), 1);
    EXPECT_DOUBLE_EQ(writer.scored_nll_sum(), 0.25);
  }
  unsigned char greedy[2] = {9, 9};
  int64_t starts[2] = {0, 0};
  double perplexity[2] = {0, 0};
  read_partial(Dataset::kIsGreedy, H5T_NATIVE_UCHAR, greedy);
  read_partial(Dataset::kScoreStart, H5T_NATIVE_INT64, starts);
  read_partial(Dataset::kPerplexity, H5T_NATIVE_DOUBLE, perplexity);
  EXPECT_EQ(greedy[0], 1);
  EXPECT_EQ(starts[0], 2);
  EXPECT_EQ(starts[1], 1);
  EXPECT_DOUBLE_EQ(perplexity[0], std::exp(0.25));
}

TEST_F(OutputFileTest, APartialWithoutALaterDatasetGainsIt) {
  {
    ResultWriter writer(path_, layout_, identity_, false, 0);
    store_first_prompt(writer);
  }
  const std::string partial = path_ + ".partial";
  const DatasetSpec* later = nullptr;
  for (const DatasetSpec& spec : output_datasets())
    if (spec.added_later) later = &spec;
  ASSERT_NE(later, nullptr);
  {
    H5Handle file{H5Fopen(partial.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose};
    ASSERT_GE(H5Ldelete(file.id, later->name, H5P_DEFAULT), 0);
  }
  {
    ResultWriter writer(path_, layout_, identity_, true, 0);
    EXPECT_EQ(writer.completed(), (std::vector<char>{1, 0}));
    const float logprobs[2] = {NAN, -2}, topk_logprobs[4] = {-0.1f, -2, -0.2f, -3};
    const int32_t topk_ids[4] = {1, 2, 3, 4};
    writer.write_token_rows(1, 0, 2, {logprobs, topk_logprobs, topk_ids, nullptr});
    const float row[5] = {5, 4, 3, 2, 1}, hidden[3] = {1, 2, 3};
    writer.write_prompt(1, row, hidden, 0.25, 1, 1);  // (reused and restored: whichever was added later)
    EXPECT_TRUE(writer.finish({}, {{"version", "test"}}));
  }
  H5Handle file{H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose};
  ASSERT_GE(file.id, 0);
  EXPECT_GT(H5Lexists(file.id, dataset_spec(Dataset::kTimeline).name, H5P_DEFAULT), 0);
  {  // the ids, written with the timeline
    H5Handle ids{H5Dopen2(file.id, dataset_spec(Dataset::kIds).name, H5P_DEFAULT), H5Dclose};
    ASSERT_GE(ids.id, 0);
    H5Handle type{H5Tcopy(H5T_C_S1), H5Tclose};
    H5Tset_size(type.id, H5T_VARIABLE);
    H5Tset_cset(type.id, H5T_CSET_UTF8);
    char* text[2] = {nullptr, nullptr};
    ASSERT_GE(H5Dread(ids.id, type.id, H5S_ALL, H5S_ALL, H5P_DEFAULT, text), 0);
    EXPECT_STREQ(text[0], "first");
    EXPECT_STREQ(text[1], "second ü");
    H5Handle space{H5Dget_space(ids.id), H5Sclose};
    H5Dvlen_reclaim(type.id, space.id, H5P_DEFAULT, text);
  }
  H5Handle set{H5Dopen2(file.id, later->name, H5P_DEFAULT), H5Dclose};
  ASSERT_GE(set.id, 0);
  std::vector<double> values(layout_.num_prompts);
  ASSERT_GE(H5Dread(set.id, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  EXPECT_EQ(values[0], -1);  // as a new file holds it: prompt 0 was stored before it existed
  EXPECT_EQ(values[1], 1);
}

}  // namespace
}  // namespace pf::io
