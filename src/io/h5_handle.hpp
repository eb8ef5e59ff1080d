// RAII for HDF5 ids: every open handle is closed on scope exit, on every error path too.
// Movable, so that a table of them (the output's datasets) can be filled in a loop.
#pragma once

#include <hdf5.h>

namespace pf::io {

struct H5Handle {
  hid_t id = -1;
  herr_t (*close)(hid_t) = nullptr;

  H5Handle() = default;
  H5Handle(hid_t id_, herr_t (*close_)(hid_t)) : id(id_), close(close_) {}
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  H5Handle(H5Handle&& other) noexcept : id(other.id), close(other.close) { other.id = -1; }
  H5Handle& operator=(H5Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id = other.id;
      close = other.close;
      other.id = -1;
    }
    return *this;
  }
  ~H5Handle() { reset(); }

  // Closes now; the status of the close (negative: HDF5 failed to close it).
  herr_t reset() {
    const herr_t status = id >= 0 && close ? close(id) : 0;
    id = -1;
    return status;
  }
};

// File access for a file one of our own flocks guards (io/output_lock.hpp): HDF5's own lock
// on a second descriptor of it would conflict with ours.
inline H5Handle unlocked_file_access() {
  H5Handle access{H5Pcreate(H5P_FILE_ACCESS), H5Pclose};
  if (access.id >= 0) H5Pset_file_locking(access.id, false, true);
  return access;
}

}  // namespace pf::io
