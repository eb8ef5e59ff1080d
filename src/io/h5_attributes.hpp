// Scalar string attributes of HDF5 objects: how pipefill writes them (fixed-length, what
// h5py and h5dump read as text) and reads them back (fixed or variable length, as other
// tools may write them). One place for both, so every file pipefill names itself in reads
// the same way.
#pragma once

#include <hdf5.h>

#include <optional>
#include <string>

namespace pf::io {

// Writes `text` as a scalar fixed-length string attribute, replacing one of that name.
void write_string_attribute(hid_t object, const char* name, const std::string& text);

// The attribute's text (up to a NUL a fixed size may hold), or nothing where it is absent,
// not a scalar string, or unreadable.
std::optional<std::string> read_string_attribute(hid_t object, const char* name);

}  // namespace pf::io
