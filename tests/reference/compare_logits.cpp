// Compares /logits of two HDF5 files (any float type) prompt by prompt.
// Relative error of a prompt = max_v |actual - expected| / max_v |expected|.
// usage: compare_logits ACTUAL.h5 EXPECTED.h5 [--rtol 1e-4]   exit 0 when every prompt passes.
#include <hdf5.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace {

bool read_logits(const std::string& path, std::vector<double>& data, hsize_t dims[2]) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) return false;
  hid_t dataset = H5Dopen2(file, "logits", H5P_DEFAULT);
  if (dataset < 0) return H5Fclose(file), false;
  hid_t space = H5Dget_space(dataset);
  const bool ok2d = H5Sget_simple_extent_ndims(space) == 2;
  if (ok2d) H5Sget_simple_extent_dims(space, dims, nullptr);
  data.resize(ok2d ? dims[0] * dims[1] : 0);
  const bool ok = ok2d && H5Dread(dataset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()) >= 0;
  H5Sclose(space);
  H5Dclose(dataset);
  H5Fclose(file);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: compare_logits ACTUAL.h5 EXPECTED.h5 [--rtol R]\n");
    return 2;
  }
  const double rtol = argc >= 5 && std::string(argv[3]) == "--rtol" ? std::stod(argv[4]) : 1e-4;
  std::vector<double> actual, expected;
  hsize_t a_dims[2] = {0, 0}, e_dims[2] = {0, 0};
  if (!read_logits(argv[1], actual, a_dims))
    return std::fprintf(stderr, "FAILED: cannot read /logits of %s\n", argv[1]), 1;
  if (!read_logits(argv[2], expected, e_dims))
    return std::fprintf(stderr, "FAILED: cannot read /logits of %s\n", argv[2]), 1;
  if (a_dims[0] != e_dims[0] || a_dims[1] != e_dims[1]) {
    std::fprintf(stderr, "FAILED: shapes differ: [%llu, %llu] vs [%llu, %llu]\n", (unsigned long long)a_dims[0],
                 (unsigned long long)a_dims[1], (unsigned long long)e_dims[0], (unsigned long long)e_dims[1]);
    return 1;
  }
  double worst = 0;
  bool pass = a_dims[0] > 0;
  for (hsize_t p = 0; p < a_dims[0]; ++p) {
    double diff = 0, scale = 0;
    for (hsize_t v = 0; v < a_dims[1]; ++v) {
      const double a = actual[p * a_dims[1] + v], e = expected[p * a_dims[1] + v];
      if (!std::isfinite(a)) diff = INFINITY;  // NaN never passes
      diff = std::max(diff, std::fabs(a - e));
      scale = std::max(scale, std::fabs(e));
    }
    const double rel = scale > 0 ? diff / scale : diff;
    worst = std::max(worst, rel);
    if (!(rel <= rtol)) pass = false;
  }
  std::printf("%s: %llu prompts x %llu logits, worst relative error %.3e (tolerance %.1e)\n",
              pass ? "Passed" : "FAILED", (unsigned long long)a_dims[0], (unsigned long long)a_dims[1], worst, rtol);
  return pass ? 0 : 1;
}
