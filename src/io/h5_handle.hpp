// RAII for HDF5 ids: every open handle is closed on scope exit, on every error path too.
#pragma once

#include <hdf5.h>

namespace pf::io {

struct H5Handle {
  hid_t id;
  herr_t (*close)(hid_t);
  H5Handle(hid_t id_, herr_t (*close_)(hid_t)) : id(id_), close(close_) {}
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  ~H5Handle() {
    if (id >= 0) close(id);
  }
};

}  // namespace pf::io
