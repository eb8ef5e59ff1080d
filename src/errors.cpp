// Reporting of failed library calls (see errors.hpp). Kept out of line so the macros stay small.
#include "errors.hpp"

#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace pf {

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "code " + std::to_string(code);
  return std::string(text, length);
}

void fail_library_call(const char* lib, const char* statement, const std::string& detail, const char* file, int line) {
  int rank = -1, initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char host[256] = "?";
  gethostname(host, sizeof host);
  std::fprintf(stderr, "fatal: %s call `%s` failed (%s) at %s:%d on rank %d (%s)\n", lib, statement, detail.c_str(),
               file, line, rank, host);
  std::fflush(stderr);
  if (initialized) MPI_Abort(MPI_COMM_WORLD, 3);
  // The commands without MPI (plan, simulate, make-*): the same exit status 3 as a run's
  // (docs/formats.md), not abort()'s SIGABRT.
  std::_Exit(3);
}

}  // namespace pf
