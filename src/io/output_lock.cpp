// flock on the partial output (see output_lock.hpp).
#include "io/output_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "errors.hpp"

namespace pf::io {

OutputLock::OutputLock(const std::string& partial_path, const std::string& output_path) : path_(partial_path) {
  struct stat info {};
  existed_ = ::stat(partial_path.c_str(), &info) == 0;
  size_before_ = existed_ ? static_cast<long long>(info.st_size) : 0;
  fd_ = ::open(partial_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd_ < 0) throw UserError("cannot open " + partial_path + " for writing (" + std::strerror(errno) + ")");
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(fd_);
    fd_ = -1;
    path_.clear();  // not ours to remove
    if (error == EWOULDBLOCK)
      throw UserError("another pipefill run is writing " + output_path + " (it holds " + partial_path +
                      "); wait for it to end, or write elsewhere");
    throw UserError("cannot lock " + partial_path + " (" + std::strerror(error) + ")");
  }
}

OutputLock::~OutputLock() {
  if (fd_ < 0) return;
  struct stat info {};
  // A partial that this run created and never wrote (a refused resume, an error before the
  // first write) goes; one that held something before this run is left as it was.
  if (!path_.empty() && !existed_ && ::fstat(fd_, &info) == 0 && info.st_size == 0) ::unlink(path_.c_str());
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
}

}  // namespace pf::io
