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
bool g_unwind = false;          // set once by main, before any other thread exists
bool g_isolated_child = false;  // set in a forked reader, before its work
}  // namespace

void unwind_library_failures() {
  g_unwind = true;
}

void mark_isolated_child() {
  g_isolated_child = true;
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
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);  // (a local query: a forked copy may ask)
  char host[256] = "?";
  gethostname(host, sizeof host);
  report_library_failure(std::string("fatal: ") + lib + " call `" + statement + "` failed (" + detail +
                         (full_disk ? "; no space left on the device" : "") + ") at " + file + ":" +
                         std::to_string(line) + (g_isolated_child ? " in a forked reader of rank " : " on rank ") +
                         std::to_string(rank) + " (" + host + ")");
}

void report_library_failure(const std::string& fatal_line) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  const bool mpi = initialized && !finalized && !g_isolated_child;
  // The commands without MPI: unwound, so that the files they were writing are removed; main
  // prints it and exits with status 3 as a run would (docs/formats.md). A forked reader's:
  // unwound to its child_main, which hands the line to the parent (which reports it here).
  // Never from a failure met while unwinding (a destructor's), which would end in std::terminate.
  if ((g_unwind || g_isolated_child) && !mpi && std::uncaught_exceptions() == 0) throw LibraryFailure(fatal_line);
  std::fprintf(stderr, "%s\n", fatal_line.c_str());
  std::fflush(stderr);
  if (mpi) MPI_Abort(MPI_COMM_WORLD, 3);
  std::_Exit(3);  // (not abort()'s SIGABRT)
}

}  // namespace pf
