// Forked reads (io/isolated_call.hpp): what the child returns or throws reaches the parent.
#include <gtest/gtest.h>

#include <string>

#include "errors.hpp"
#include "io/isolated_call.hpp"

namespace pf::io {
namespace {

TEST(IsolatedCall, ReturnsTheChildsResult) {
  EXPECT_EQ(run_isolated("test", 30, [] { return std::string("from the child"); }), "from the child");
}

TEST(IsolatedCall, TheChildsUserErrorIsRethrown) {
  try {
    run_isolated("test", 30, []() -> std::string { throw UserError("a bad file"); });
    FAIL() << "no UserError";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "a bad file");
  }
}

// A failed library call in the child is reported by the parent as its own (here, without MPI:
// the fatal line and exit status 3), never as a crash of the reader, and the child never
// reaches MPI itself.
TEST(IsolatedCallDeathTest, TheChildsLibraryFailureIsTheParents) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      run_isolated("test", 30,
                   []() -> std::string { fail_library_call("HDF5", "H5Fopen(...)", "injected", __FILE__, __LINE__); }),
      testing::ExitedWithCode(kExitLibraryFailure),
      "fatal: HDF5 call `H5Fopen\\(...\\)` failed \\(injected\\) at .* in a forked reader of rank");
}

}  // namespace
}  // namespace pf::io
