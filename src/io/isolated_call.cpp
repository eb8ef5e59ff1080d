// Forked reads (see isolated_call.hpp). The child writes [status][length][bytes] to a pipe;
// the parent polls the pipe against the time limit.
#include "io/isolated_call.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <exception>
#include <stdexcept>

#include "errors.hpp"

namespace pf::io {
namespace {

bool write_all(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

double monotonic_seconds() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

// Reads exactly `bytes`, waiting at most until `deadline` (0: forever). False on EOF,
// error or timeout (`timed_out` says which).
bool read_all_until(int fd, void* data, size_t bytes, double deadline, bool& timed_out) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    int wait_ms = -1;
    if (deadline > 0) {
      const double left = deadline - monotonic_seconds();
      if (left <= 0) return timed_out = true, false;
      wait_ms = static_cast<int>(left * 1000) + 1;
    }
    pollfd ready{fd, POLLIN, 0};
    const int polled = ::poll(&ready, 1, wait_ms);
    if (polled < 0 && errno == EINTR) continue;
    if (polled < 0) return false;
    if (polled == 0) continue;  // the deadline check above ends it
    const ssize_t n = ::read(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

[[noreturn]] void child_main(int fd, pid_t parent, const std::function<std::string()>& work) {
  // Die with the parent: a killed job must not leave a reader behind (mpirun would not
  // know about it, and it may be blocked on a file forever).
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);
  mark_isolated_child();  // a failed library call is this child's error, not an MPI_Abort
  int64_t status = 0;
  std::string payload;
  try {
    payload = work();
  } catch (const std::exception& e) {  // status 1: the user's error; 3: a failed library call; 2: else
    status = dynamic_cast<const UserError*>(&e) ? 1 : dynamic_cast<const LibraryFailure*>(&e) ? 3 : 2;
    payload = e.what();
  }
  const int64_t length = static_cast<int64_t>(payload.size());
  write_all(fd, &status, sizeof status) && write_all(fd, &length, sizeof length) &&
      write_all(fd, payload.data(), payload.size());
  _exit(0);
}

}  // namespace

std::string run_isolated(const std::string& what, double timeout_s, const std::function<std::string()>& work) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe() failed");
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) throw std::runtime_error("fork() failed");
  if (child == 0) {
    ::close(fds[0]);
    child_main(fds[1], parent, work);
  }
  ::close(fds[1]);
  const double deadline = timeout_s > 0 ? monotonic_seconds() + timeout_s : 0;
  int64_t status = -1, length = 0;
  std::string payload;
  bool timed_out = false;
  bool ok = read_all_until(fds[0], &status, sizeof status, deadline, timed_out) &&
            read_all_until(fds[0], &length, sizeof length, deadline, timed_out) && length >= 0;
  if (ok) {
    payload.resize(static_cast<size_t>(length));
    ok = read_all_until(fds[0], payload.data(), payload.size(), deadline, timed_out);
  }
  ::close(fds[0]);
  if (!ok) kill(child, SIGKILL);  // a hung or dying child: it must not outlive this call
  int wait_status = 0;
  while (waitpid(child, &wait_status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out)
    throw UserError(what + ": reading it did not finish within " + std::to_string(static_cast<long>(timeout_s)) +
                    " s (--watchdog-timeout); is it on a hung file system?");
  if (!ok)
    throw UserError(what + ": the HDF5 library crashed reading this file (signal " +
                    std::to_string(WIFSIGNALED(wait_status) ? WTERMSIG(wait_status) : 0) +
                    "): it is corrupt or not a file pipefill wrote");
  if (status == 1) throw UserError(payload);
  if (status == 3) report_library_failure(payload);  // as if this process had failed the call
  if (status != 0) throw std::runtime_error(payload);
  return payload;
}

}  // namespace pf::io
