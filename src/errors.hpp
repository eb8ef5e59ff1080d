// Two kinds of failure, kept apart on purpose:
//  - UserError: bad flag, bad input, impossible configuration. Rank 0 prints one
//    `error: ...` line and every rank exits with status 2.
//  - A failing library call (MPI, HDF5, ...): a bug or a system fault. The check macros
//    below print rank, host, statement and file:line, then abort the whole job (never hang).
// Library code throws; only the driver (main.cpp) decides to exit.
#pragma once

#include <cerrno>
#include <stdexcept>
#include <string>

namespace pf {

constexpr int kExitUserError = 2;
constexpr int kExitLibraryFailure = 3;  // a failed library call or a bug (docs/formats.md)

struct UserError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A failing library call in a command without MPI (plan, simulate, advise, make-*), once
// main has said so (unwind_library_failures): thrown with its "fatal: ..." line, so that the
// files being written are removed on the way out; main prints it and exits with status 3.
struct LibraryFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
void unwind_library_failures();
// In a forked reader (io/isolated_call.hpp): a failure there is thrown too, whatever the
// command, and never reaches MPI, which belongs to the parent (MPI_Abort from a forked copy
// of a rank is undefined); the child hands it to the parent as its error.
void mark_isolated_child();

// Prints "fatal: <lib> call `stmt` failed (<detail>) at file:line on rank R (host)" and
// calls MPI_Abort so that no peer is left waiting (without MPI: exits with status 3), or, in
// a command that unwinds (above) and is not already unwinding, throws it as a LibraryFailure.
// Never returns.
[[noreturn]] void fail_library_call(const char* lib, const char* statement, const std::string& detail, const char* file,
                                    int line);
// The same for a "fatal: ..." line already composed (a forked reader's, in its parent).
[[noreturn]] void report_library_failure(const std::string& fatal_line);

std::string mpi_error_string(int code);

}  // namespace pf

// One template for every library's check macro: evaluate, test, report with context
// through `fail` (lib, statement, detail, file, line). MPI-free code (the CUDA backend)
// passes its own `fail`; the rest reports through fail_library_call.
// (errno is cleared first, so that a failure's "no space left" is this call's, not older.)
#define PF_CHECK_WITH(fail, lib, stmt, is_ok, detail_of)                                               \
  do {                                                                                                 \
    errno = 0;                                                                                         \
    auto pf_check_result_ = (stmt);                                                                    \
    if (!(is_ok(pf_check_result_))) fail(lib, #stmt, detail_of(pf_check_result_), __FILE__, __LINE__); \
  } while (0)
#define PF_CHECK_TEMPLATE(lib, stmt, is_ok, detail_of) \
  PF_CHECK_WITH(::pf::fail_library_call, lib, stmt, is_ok, detail_of)

#define PF_MPI_OK(r) ((r) == MPI_SUCCESS)
#define PF_H5_OK(r) ((r) >= 0)
#define PF_H5_DETAIL(r) std::string("status ") + std::to_string(static_cast<long long>(r))

#define MPI_CHECK(stmt) PF_CHECK_TEMPLATE("MPI", stmt, PF_MPI_OK, ::pf::mpi_error_string)
#define H5_CHECK(stmt) PF_CHECK_TEMPLATE("HDF5", stmt, PF_H5_OK, PF_H5_DETAIL)
