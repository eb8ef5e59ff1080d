// Files that survive a crash once written: the data synced to the disk before the function
// returns, and a directory's entries (a file created or renamed into it) synced too. Used by
// the KV store's entries, the checkpoints' files and their manifests.
#pragma once

#include <cstddef>
#include <string>

namespace pf::io {

// Writes `bytes` to `path` (created or truncated) and makes them durable (fdatasync);
// std::runtime_error "cannot write PATH: reason" otherwise.
void write_durably(const std::string& path, const void* data, size_t bytes);

// Written whole or not at all: `text` into PATH.tmp durably, renamed to `path`, the directory
// synced; std::runtime_error otherwise (the temporary removed).
void write_atomically(const std::string& path, const std::string& text);

// Makes a directory's entries durable (best effort: a directory that cannot be opened is left).
void sync_directory(const std::string& path);

}  // namespace pf::io
