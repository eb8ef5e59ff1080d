// Durable writes (see durable_file.hpp).
#include "io/durable_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace pf::io {

void write_durably(const std::string& path, const void* data, size_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  bool ok = fd >= 0;
  for (size_t done = 0; ok && done < bytes;) {
    const ssize_t n = ::write(fd, static_cast<const char*>(data) + done, bytes - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    done += ok ? static_cast<size_t>(n) : 0;
  }
  const int error = errno;
  ok = ok && ::fdatasync(fd) == 0;
  if (fd >= 0) ::close(fd);
  if (!ok) throw std::runtime_error("cannot write " + path + ": " + std::strerror(error ? error : EIO));
}

void write_atomically(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp";
  try {
    write_durably(temporary, text.data(), text.size());
  } catch (...) {
    ::unlink(temporary.c_str());
    throw;
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int reason = errno;
    ::unlink(temporary.c_str());
    throw std::runtime_error("cannot write " + path + ": " + std::strerror(reason));
  }
  sync_directory(std::filesystem::path(path).parent_path().string());
}

void sync_directory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace pf::io
