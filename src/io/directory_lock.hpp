// The lock that makes a run the only one writing into a directory of its own naming (the
// --save-kv export): an exclusive flock(2) on DIR/.pipefill.lock, taken by rank 0 before any
// file there is read or written and held to the end of the run. The file names its holder
// (pid, host, output), so a second run is refused with a line that says which run to wait
// for. Like OutputLock, a killed holder's lock is dropped by the kernel: never stale.
#pragma once

#include <string>
#include <vector>

namespace pf::io {

class DirectoryLock {
 public:
  // Creates `directory` if needed, then locks it. UserError naming the holder when another
  // process holds it; `role` ("--save-kv") and `holder` (this run, in words) go in messages.
  DirectoryLock(const std::string& directory, const std::string& role, const std::string& holder);
  ~DirectoryLock();  // removes the lock file, then unlocks
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

  // Removes what killed runs left: `NAME.partial.PID` files (a file being written is that
  // until renamed) whose NAME, relative to the directory, matches one of `names` (fnmatch
  // patterns, e.g. "prompt-*/stage*_tp*.safetensors"). Only the holder may do this, since no
  // other run can be writing there. Returns how many it removed.
  int remove_partial_files(const std::vector<std::string>& names) const;
  // Removes an earlier run's files of those names (--overwrite replacing an export), then the
  // directories they leave empty. Returns how many files it removed.
  int remove_files(const std::vector<std::string>& names) const;

 private:
  std::string directory_;
  std::string path_;
  int fd_ = -1;
};

// This process in words, for a lock's holder line: "pid 1234 on node07, --output out.h5".
std::string this_run_in_words(const std::string& output);

}  // namespace pf::io
