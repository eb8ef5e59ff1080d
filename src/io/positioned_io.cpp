// Whole reads and writes at an offset (see positioned_io.hpp).
#include "io/positioned_io.hpp"

#include <unistd.h>

#include <cerrno>

namespace pf::io {

bool read_at(int fd, void* out, size_t bytes, uint64_t offset) {
  auto* p = static_cast<char*>(out);
  while (bytes > 0) {
    const ssize_t got = ::pread(fd, p, bytes, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    bytes -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return true;
}

bool write_at(int fd, const void* data, size_t bytes, uint64_t offset) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t written = ::pwrite(fd, p, bytes, static_cast<off_t>(offset));
    if (written < 0 && errno == EINTR) continue;
    if (written == 0) errno = EIO;  // no progress and no reason given
    if (written <= 0) return false;
    p += written;
    bytes -= static_cast<size_t>(written);
    offset += static_cast<uint64_t>(written);
  }
  return true;
}

}  // namespace pf::io
