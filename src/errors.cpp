// Reporting of failed library calls (see errors.hpp). Kept out of line so the macros stay small.
#include "errors.hpp"

#include <mpi.h>
#include <unistd.h>

#include <cerrno>
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
  const bool full_disk = errno == ENOSPC;  // (before anything below sets errno)
  int rank = -1, initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char host[256] = "?";
  gethostname(host, sizeof host);
  char text[2048];
  std::snprintf(text, sizeof text, "fatal: %s call `%s` failed (%s%s) at %s:%d on rank %d (%s)", lib, statement,
                detail.c_str(), full_disk ? "; no space left on the device" : "", file, line, rank, host);
  // The commands without MPI (plan, simulate, advise, make-*): unwound, so that the files
  // they were writing are removed; main prints it and exits with status 3 as a run would
  // (docs/formats.md).
  if (!initialized || finalized) throw LibraryFailure(text);
  std::fprintf(stderr, "%s\n", text);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::_Exit(3);
}

}  // namespace pf
