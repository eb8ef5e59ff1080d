// Reading a file that libhdf5 may crash or block on, in a forked child process. libhdf5
// (1.10) can crash on a corrupt file (a fuzzer found a NULL memcpy in H5F__accum_read behind
// H5Lexists), and any open() can block on an odd file; in a child, a crash or a hang becomes a
// UserError and the job goes on to end cleanly. The child never touches MPI, dies with its
// parent (PR_SET_PDEATHSIG) and is killed and reaped when it overruns `timeout_s`.
#pragma once

#include <functional>
#include <string>

namespace pf::io {

// Runs `work` in a child and returns what it returned. A UserError thrown by `work` is
// rethrown here with its message; a crash, a hang past `timeout_s` (0: no limit) or a lost
// child is a UserError naming `what` (e.g. "input file in.h5"). A failed library call in the
// child (errors.hpp) is reported by this process, as if it had failed the call itself: unwound
// in a command without MPI, the job aborted in a run.
std::string run_isolated(const std::string& what, double timeout_s, const std::function<std::string()>& work);

}  // namespace pf::io
