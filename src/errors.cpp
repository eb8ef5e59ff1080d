// Reporting of failed library calls (see errors.hpp). Kept out of line so the macros stay small.
#include "errors.hpp"

#include <mpi.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

namespace pf {

namespace {
bool g_unwind = false;  // set once by main, before any other thread exists
}  // namespace

void unwind_library_failures() {
  g_unwind = true;
}

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "code " + std::to_string(code);
  return std::string(text, length);
}

void fail_library_call(const char* lib, const char* statement, const std::string& detail, const char* file, int line) {
  const bool full_disk = errno == ENOSPC;  // (before anything below sets errno)
  int rank = -1, initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  const bool mpi = initialized && !finalized;
  if (mpi) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char host[256] = "?";
  gethostname(host, sizeof host);
  const std::string text = std::string("fatal: ") + lib + " call `" + statement + "` failed (" + detail +
                           (full_disk ? "; no space left on the device" : "") + ") at " + file + ":" +
                           std::to_string(line) + " on rank " + std::to_string(rank) + " (" + host + ")";
  // The commands without MPI: unwound, so that the files they were writing are removed; main
  // prints it and exits with status 3 as a run would (docs/formats.md). Never from a failure
  // met while unwinding (a destructor's), which would end in std::terminate.
  if (g_unwind && !mpi && std::uncaught_exceptions() == 0) throw LibraryFailure(text);
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
  if (mpi) MPI_Abort(MPI_COMM_WORLD, 3);
  std::_Exit(3);  // (not abort()'s SIGABRT)
}

}  // namespace pf
