// Path checks (see file_checks.hpp).
#include "io/file_checks.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "errors.hpp"

namespace pf::io {
namespace fs = std::filesystem;

void require_regular_file(const std::string& path, const std::string& role) {
  struct stat info {};
  if (path.empty()) throw UserError(role + ": empty path");
  if (::stat(path.c_str(), &info) != 0) throw UserError("cannot read " + role + " " + path + " (no such file)");
  if (S_ISDIR(info.st_mode)) throw UserError(role + " " + path + " is a directory, not a file");
  if (!S_ISREG(info.st_mode))
    throw UserError(role + " " + path + " is not a regular file (a FIFO, socket or device would block the run)");
}

void require_regular_if_present(const std::string& path, const std::string& role) {
  struct stat info {};
  if (!path.empty() && ::stat(path.c_str(), &info) == 0) require_regular_file(path, role);
}

void require_writable_file_path(const std::string& path, const std::string& role) {
  if (path.empty()) throw UserError(role + " is empty: give a file name");
  if (path.back() == '/') throw UserError(role + " " + path + " ends in '/': give a file name, not a directory");
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0) {
    if (S_ISDIR(info.st_mode)) throw UserError(role + " " + path + " is a directory: give a file name");
    if (!S_ISREG(info.st_mode)) throw UserError(role + " " + path + " exists and is not a regular file");
  }
  fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) parent = ".";
  std::error_code error;
  if (!fs::is_directory(parent, error))
    throw UserError(role + " " + path + ": directory " + parent.string() + " does not exist (create it first)");
  if (::access(parent.c_str(), W_OK | X_OK) != 0)
    throw UserError(role + " " + path + ": directory " + parent.string() + " is not writable");
  // access() says yes to root everywhere, and some directories take no new files whatever
  // their mode (/proc, /sys): a file made and removed there now, not at the end of the run.
  const std::string probe = (parent / (".pipefill-probe-" + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0 && errno != EEXIST)
    throw UserError(role + " " + path + ": cannot create a file in directory " + parent.string() + " (" +
                    std::strerror(errno) + ")");
  if (fd >= 0) {
    ::close(fd);
    ::unlink(probe.c_str());
  }
}

void require_writable_directory(const std::string& path, const std::string& role) {
  if (path.empty()) throw UserError(role + " is empty: give a directory");
  std::error_code error;
  fs::path existing = fs::absolute(path, error).lexically_normal();
  if (existing.filename().empty()) existing = existing.parent_path();  // "dir/"
  while (!fs::exists(existing, error) && existing.has_parent_path() && existing != existing.parent_path()) {
    // A link to nowhere is not a directory to be made: creating it would fail mid-run.
    if (fs::is_symlink(fs::symlink_status(existing, error)))
      throw UserError(role + " " + path + ": " + existing.string() + " is a symbolic link to nothing");
    existing = existing.parent_path();
  }
  if (!fs::is_directory(existing, error))
    throw UserError(role + " " + path + ": " + existing.string() + " exists and is not a directory");
  if (::access(existing.c_str(), W_OK | X_OK) != 0)
    throw UserError(role + " " + path + ": directory " + existing.string() + " is not writable");
}

namespace {

struct Identity {
  bool exists = false;
  dev_t device = 0;
  ino_t inode = 0;
  std::string normalised;
};

Identity identify(const std::string& path) {
  Identity id;
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0) {
    id.exists = true;
    id.device = info.st_dev;
    id.inode = info.st_ino;
  }
  std::error_code error;
  fs::path absolute = fs::weakly_canonical(fs::absolute(path, error), error);
  id.normalised = (error ? fs::absolute(path).lexically_normal() : absolute).string();
  return id;
}

bool same_file(const Identity& a, const Identity& b) {
  if (a.exists && b.exists) return a.device == b.device && a.inode == b.inode;
  return a.normalised == b.normalised;
}

}  // namespace

void require_outside_directory(const std::vector<PathRole>& roles, const PathRole& directory) {
  if (directory.path.empty()) return;
  std::string base = identify(directory.path).normalised;
  while (base.size() > 1 && base.back() == '/') base.pop_back();  // "dir/" names dir too
  const std::string inside = base + "/";
  for (const auto& r : roles)
    if (!r.path.empty() && identify(r.path).normalised.rfind(inside, 0) == 0)
      throw UserError(r.role + " " + r.path + " lies inside " + directory.role + " " + directory.path +
                      ", which the run writes into: choose paths outside it");
}

void require_no_file_of(const std::vector<PathRole>& roles, const PathRole& directory) {
  std::error_code error;
  if (!fs::is_directory(directory.path, error)) return;  // (synthetic:PRESET, a config.json): no files
  const fs::path base = fs::weakly_canonical(fs::absolute(directory.path, error), error);
  for (const auto& r : roles) {
    if (r.path.empty() || !fs::exists(fs::symlink_status(r.path, error))) continue;
    // The file's own name as given (a symlink in the directory is the directory's file), in its
    // parent directory resolved.
    const fs::path absolute = fs::absolute(r.path, error);
    const fs::path parent = fs::weakly_canonical(absolute.parent_path(), error);
    if (parent == base)
      throw UserError(r.role + " " + r.path + " is a file of " + directory.role + " " + directory.path +
                      ", which the run reads: give another path");
  }
}

void require_distinct_paths(const std::vector<PathRole>& roles) {
  std::vector<Identity> ids;
  for (const auto& r : roles) ids.push_back(r.path.empty() ? Identity{} : identify(r.path));
  for (size_t i = 0; i < roles.size(); ++i)
    for (size_t j = i + 1; j < roles.size(); ++j)
      if (!roles[i].path.empty() && !roles[j].path.empty() && same_file(ids[i], ids[j]))
        throw UserError(roles[i].role + " (" + roles[i].path + ") and " + roles[j].role + " (" + roles[j].path +
                        ") are the same file: writing one would destroy the other");
}

}  // namespace pf::io
