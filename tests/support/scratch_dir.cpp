// Every unit test process writes its temporary files into a folder of its own, removed when
// the process's tests end: the tests name their files after temp_directory_path(), which
// reads TMPDIR, so pointing TMPDIR there is enough. (Before, each CI run left a few hundred
// files in /tmp.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace {

class ScratchDir : public testing::Environment {
 public:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("pipefill_unit_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    ::setenv("TMPDIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    std::error_code ignored;  // a test still holding a file open must not fail the run here
    std::filesystem::remove_all(dir_, ignored);
  }

 private:
  std::filesystem::path dir_;
};

[[maybe_unused]] testing::Environment* const kScratch = testing::AddGlobalTestEnvironment(new ScratchDir);

}  // namespace
