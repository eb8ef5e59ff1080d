// The one pattern of rank-0 protocols: rank 0 decides, every rank learns the decision; every
// rank reports, rank 0 reads the reports. Everything that travels is text (JSON, a serialised
// plan, a digest) or a vector of trivially copyable values, so no caller touches bytes or MPI.
// Values that mean something on rank 0 only are RootOnly, so a signature says what it holds
// on which rank. All functions are collective over `comm`, whose rank 0 is the root.
#pragma once

#include <mpi.h>

#include <cstring>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace pf::dist {

// A value held by the root only; reading it elsewhere is a std::logic_error.
template <class T>
class RootOnly {
 public:
  RootOnly() = default;  // elsewhere (or not decided yet)
  static RootOnly on_root(T value) {
    RootOnly held;
    held.value_.emplace(std::move(value));
    return held;
  }
  bool here() const { return value_.has_value(); }
  const T& operator*() const { return checked(); }
  T& operator*() { return const_cast<T&>(checked()); }
  const T* operator->() const { return &checked(); }

 private:
  const T& checked() const {
    if (!value_) throw std::logic_error("RootOnly: read on a rank that does not hold it");
    return *value_;
  }
  std::optional<T> value_;
};

// `decide` runs on rank 0 only, inside a checked_step (a UserError it throws is every rank's
// `error:`; any other exception is a bug that takes the job down from rank 0, as everywhere);
// its text is returned on every rank.
std::string decide_on_root(MPI_Comm comm, const std::function<std::string()>& decide);

// Every rank's `mine`, on rank 0 in rank order.
RootOnly<std::vector<std::string>> gather_on_root(MPI_Comm comm, const std::string& mine);

// The same for vectors of trivially copyable values (events, counters, prompt indices).
template <class T>
RootOnly<std::vector<std::vector<T>>> gather_values_on_root(MPI_Comm comm, const std::vector<T>& mine) {
  static_assert(std::is_trivially_copyable_v<T>, "gather_values_on_root copies bytes");
  std::string bytes(mine.size() * sizeof(T), '\0');
  if (!mine.empty()) std::memcpy(bytes.data(), mine.data(), bytes.size());
  const RootOnly<std::vector<std::string>> blobs = gather_on_root(comm, bytes);
  if (!blobs.here()) return {};
  std::vector<std::vector<T>> all;
  for (const std::string& blob : *blobs) {
    all.emplace_back(blob.size() / sizeof(T));
    if (!blob.empty()) std::memcpy(all.back().data(), blob.data(), all.back().size() * sizeof(T));
  }
  return RootOnly<std::vector<std::vector<T>>>::on_root(std::move(all));
}

}  // namespace pf::dist
