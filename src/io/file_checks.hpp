// Checks on the paths a run reads and writes, made before any compute: what is read must be
// a regular file (a FIFO or a device would block or change under us), what is written must
// be writable, and no two roles may name the same file (an output over its own input).
#pragma once

#include <string>
#include <vector>

namespace pf::io {

// UserError unless `path` is an existing regular file (symlinks to one are fine).
void require_regular_file(const std::string& path, const std::string& role);
// The same for a path that exists; an absent one is left to the reader's own message.
void require_regular_if_present(const std::string& path, const std::string& role);

// UserError unless `path` can be created or replaced as a file: not empty, not ending in
// '/', not a directory or other non-regular file, in an existing directory that takes a new
// file (tried: a file is made there and removed at once).
void require_writable_file_path(const std::string& path, const std::string& role);

// UserError unless `path` is a writable directory, or can be made one (its nearest existing
// ancestor is a writable directory; the run creates the rest when it first writes there).
void require_writable_directory(const std::string& path, const std::string& role);

struct PathRole {
  std::string role;  // "--input", "--output", "the output's .partial", ...
  std::string path;  // empty: not used in this run
};

// UserError naming the first role whose path lies inside `directory` (symlinks resolved):
// a directory the run writes files into by names of its own (--save-kv).
void require_outside_directory(const std::vector<PathRole>& roles, const PathRole& directory);

// UserError naming the first role whose path names a file already in `directory` (the
// directory's own symlinks included, whatever they point to): files a run reads, never writes.
// A `directory` that is not one (synthetic:PRESET, a config.json) holds none.
void require_no_file_of(const std::vector<PathRole>& roles, const PathRole& directory);

// UserError naming the first two roles that are the same file: by device and inode where
// both exist, by normalised absolute path (symlinks resolved) otherwise.
void require_distinct_paths(const std::vector<PathRole>& roles);

}  // namespace pf::io
