// The lock that makes a run the only writer of its output. It is an exclusive flock(2) on
// OUTPUT.partial, taken before the file is created or truncated and held until the file is
// renamed into place or the run ends (the kernel drops it when the process dies, so a
// killed run never leaves a stale lock). A second run on the same output is refused
// before it touches the first run's file.
#pragma once

#include <string>

namespace pf::io {

class OutputLock {
 public:
  // Opens (creating if absent, never truncating) and locks `partial_path`. UserError if
  // another process holds it, naming `output_path`.
  OutputLock(const std::string& partial_path, const std::string& output_path);
  ~OutputLock();  // unlocks; removes the file if this lock created it and it is still empty
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

  // Whether the partial file existed before this run (with its size then).
  bool existed() const { return existed_; }
  long long size_before() const { return size_before_; }
  // The file was renamed or removed by its owner: nothing to clean up on unlock.
  void forget_path() { path_.clear(); }

 private:
  std::string path_;
  int fd_ = -1;
  bool existed_ = false;
  long long size_before_ = 0;
};

}  // namespace pf::io
