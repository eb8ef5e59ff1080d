#include "io/h5_attributes.hpp"

#include "errors.hpp"
#include "io/h5_handle.hpp"

namespace pf::io {

void write_string_attribute(hid_t object, const char* name, const std::string& text) {
  if (H5Aexists(object, name) > 0) H5_CHECK(H5Adelete(object, name));
  const H5Handle type{H5Tcopy(H5T_C_S1), H5Tclose};
  H5_CHECK(H5Tset_size(type.id, text.empty() ? 1 : text.size()));  // (a size of 0 is refused)
  const H5Handle space{H5Screate(H5S_SCALAR), H5Sclose};
  const H5Handle attribute{H5Acreate2(object, name, type.id, space.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
  H5_CHECK(attribute.id);
  H5_CHECK(H5Awrite(attribute.id, type.id, text.c_str()));
}

std::optional<std::string> read_string_attribute(hid_t object, const char* name) {
  if (H5Aexists(object, name) <= 0) return std::nullopt;
  const H5Handle attribute{H5Aopen(object, name, H5P_DEFAULT), H5Aclose};
  if (attribute.id < 0) return std::nullopt;
  const H5Handle type{H5Aget_type(attribute.id), H5Tclose};
  const H5Handle space{H5Aget_space(attribute.id), H5Sclose};
  if (H5Tget_class(type.id) != H5T_STRING || H5Sget_simple_extent_npoints(space.id) != 1) return std::nullopt;
  if (H5Tis_variable_str(type.id) > 0) {
    char* text = nullptr;
    if (H5Aread(attribute.id, type.id, &text) < 0 || !text) return std::nullopt;
    std::string value = text;
    H5free_memory(text);
    return value;
  }
  std::string text(H5Tget_size(type.id), '\0');
  if (H5Aread(attribute.id, type.id, text.data()) < 0) return std::nullopt;
  return std::string(text.c_str());
}

}  // namespace pf::io
