// Reads and writes at a file offset, whole: pread/pwrite repeated until every byte is done,
// through EINTR and short transfers. One place for the loop the safetensors reader, the KV
// export writer and a stored prompt's scores and final-norm rows all need.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pf::io {

// False when the file ends first or a read fails (errno says why, if it does).
bool read_at(int fd, void* out, size_t bytes, uint64_t offset);

// False when a write fails or makes no progress (errno set; EIO for no progress).
bool write_at(int fd, const void* data, size_t bytes, uint64_t offset);

}  // namespace pf::io
