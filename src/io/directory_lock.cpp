// flock on a directory's lock file (see directory_lock.hpp).
#include "io/directory_lock.hpp"

#include <fcntl.h>
#include <fnmatch.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "errors.hpp"

namespace pf::io {
namespace fs = std::filesystem;

namespace {

std::string read_holder(int fd) {
  char text[512] = {};
  const ssize_t got = ::pread(fd, text, sizeof(text) - 1, 0);
  std::string holder = got > 0 ? std::string(text, static_cast<size_t>(got)) : "";
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
  return holder.empty() ? "a run that has not said which yet" : holder;
}

}  // namespace

std::string this_run_in_words(const std::string& output) {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return "pid " + std::to_string(::getpid()) + " on " + host + ", --output " + output;
}

DirectoryLock::DirectoryLock(const std::string& directory, const std::string& role, const std::string& holder)
    : directory_(directory), path_((fs::path(directory) / ".pipefill.lock").string()) {
  std::error_code error;
  fs::create_directories(directory, error);
  if (error) throw UserError(role + " " + directory + ": cannot create the directory (" + error.message() + ")");
  // The holder removes the file before it unlocks, so a lock taken on a file that is no
  // longer at the path (removed between our open and our flock) is no lock: open again.
  for (;;) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd_ < 0) throw UserError("cannot open " + path_ + " for writing (" + std::strerror(errno) + ")");
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int reason = errno;
      const std::string other = reason == EWOULDBLOCK ? read_holder(fd_) : "";
      ::close(fd_);
      fd_ = -1;
      if (reason == EWOULDBLOCK)
        throw UserError(role + " " + directory + " is being written by another pipefill run (" + other +
                        "); wait for it to end, or choose another directory");
      throw UserError("cannot lock " + path_ + " (" + std::strerror(reason) + ")");
    }
    struct stat held {
    }, at_path{};
    if (::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &at_path) == 0 && held.st_dev == at_path.st_dev &&
        held.st_ino == at_path.st_ino)
      break;
    ::close(fd_);
    fd_ = -1;
  }
  const std::string line = holder + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, line.data(), line.size(), 0) != static_cast<ssize_t>(line.size())) {
    const int reason = errno;
    ::unlink(path_.c_str());  // no destructor runs for a constructor that throws
    ::close(fd_);
    fd_ = -1;
    throw UserError("cannot write " + path_ + " (" + std::strerror(reason) + ")");
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
}

int DirectoryLock::remove_partial_files(const std::vector<std::string>& names) const {
  std::vector<fs::path> litter;  // listed first: nothing is removed under a running iterator
  std::error_code walk;
  for (fs::recursive_directory_iterator it(directory_, walk), end; !walk && it != end; it.increment(walk)) {
    const std::string name = it->path().filename().string();
    const size_t at = name.rfind(".partial.");
    if (at == std::string::npos) continue;
    const std::string pid = name.substr(at + 9), file = name.substr(0, at);
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    // Only names this run's kind of writer gives its files: nothing else in DIR is touched.
    const std::string relative = it->path().lexically_relative(directory_).parent_path().append(file).string();
    const bool ours = std::any_of(names.begin(), names.end(), [&](const std::string& pattern) {
      return ::fnmatch(pattern.c_str(), relative.c_str(), FNM_PATHNAME) == 0;
    });
    std::error_code stat_error;
    if (ours && it->is_regular_file(stat_error)) litter.push_back(it->path());
  }
  int removed = 0;
  std::error_code error;
  for (const fs::path& path : litter) removed += fs::remove(path, error) ? 1 : 0;
  return removed;
}

int DirectoryLock::remove_files(const std::vector<std::string>& names) const {
  std::vector<fs::path> files;  // listed first: nothing is removed under a running iterator
  std::error_code walk;
  for (fs::recursive_directory_iterator it(directory_, walk), end; !walk && it != end; it.increment(walk)) {
    const std::string relative = it->path().lexically_relative(directory_).string();
    std::error_code stat_error;
    if (it->is_regular_file(stat_error) && std::any_of(names.begin(), names.end(), [&](const std::string& pattern) {
          return ::fnmatch(pattern.c_str(), relative.c_str(), FNM_PATHNAME) == 0;
        }))
      files.push_back(it->path());
  }
  int removed = 0;
  std::error_code error;
  for (const fs::path& path : files) {
    removed += fs::remove(path, error) ? 1 : 0;
    if (path.parent_path() != fs::path(directory_) && fs::is_empty(path.parent_path(), error))
      fs::remove(path.parent_path(), error);
  }
  return removed;
}

}  // namespace pf::io
