// The KV store on disk (see kv_store.hpp).
#include "kvcache/kv_store.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "io/durable_file.hpp"
#include "io/fnv1a.hpp"
#include "kvcache/kv_directories.hpp"

namespace pf::kv {

namespace fs = std::filesystem;

namespace {

std::string entry_name(const std::string& key, uint64_t tokens_hash, int64_t tokens) {
  return key + "-" + tokens_hash_text(tokens_hash) + "-" + std::to_string(tokens);
}

// Each entry's chain of parents resolved, root first: `segments` and `chain` filled; an entry
// whose parent is missing, unusable or does not hold the tokens it takes is unusable.
std::vector<StoreEntry> resolve_chains(std::vector<StoreEntry> entries, std::vector<UnusableEntry>* unusable) {
  std::map<std::string, int> by_name;
  for (int e = 0; e < static_cast<int>(entries.size()); ++e) by_name[fs::path(entries[e].dir).filename().string()] = e;
  std::vector<StoreEntry> usable;
  for (const StoreEntry& entry : entries) {
    std::vector<int> chain;  // itself first
    std::string why;
    for (int at = by_name.at(fs::path(entry.dir).filename().string());;) {
      if (std::find(chain.begin(), chain.end(), at) != chain.end()) {
        why = "its chain of parents loops";
        break;
      }
      chain.push_back(at);
      const StoreEntry& child = entries[at];
      if (child.parent.empty()) break;
      const auto parent = by_name.find(child.parent);
      if (parent == by_name.end()) {
        why = "the entry holding its first " + std::to_string(child.first_position) + " tokens, " + child.parent +
              ", is missing or unusable";
        break;
      }
      const StoreEntry& held = entries[parent->second];
      // A parent holds its own rows from its first position: it must begin before its child
      // does (else rows [its first, the child's) would come from nowhere or twice).
      if (held.first_position >= child.first_position) {
        why = "its parent " + child.parent + " holds its own rows only from position " +
              std::to_string(held.first_position) + ", not before position " + std::to_string(child.first_position);
        break;
      }
      if (held.tokens < child.first_position ||
          !std::equal(child.ids.begin(), child.ids.begin() + child.first_position, held.ids.begin())) {
        why = "its parent " + child.parent + " does not hold the tokens it takes from it";
        break;
      }
      at = parent->second;
    }
    if (!why.empty()) {
      if (unusable) unusable->push_back({fs::path(entry.dir).filename().string(), why});
      continue;
    }
    StoreEntry resolved = entry;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const StoreEntry& link = entries[*it];
      resolved.chain.push_back(link.dir);
      resolved.segments.push_back({link.dir + "/" + kv_prompt_dir_name(link.prompt),
                                   link.prompt,
                                   link.tokens,
                                   link.tokens_hash,
                                   -1,
                                   {},
                                   link.first_position});
    }
    usable.push_back(std::move(resolved));
  }
  return usable;
}

}  // namespace

std::string store_entry_name(const std::string& key, uint64_t tokens_hash, int64_t tokens) {
  return entry_name(key, tokens_hash, tokens);
}

std::string store_key(const std::string& model_identity, const std::string& precision) {
  return io::Fnv1a().add(model_identity).add("/").add(precision).hex();
}

std::vector<StoreEntry> list_store_entries(const std::string& dir, const std::string& key,
                                           std::vector<UnusableEntry>* unusable) {
  std::vector<StoreEntry> entries;
  std::error_code error;
  for (const fs::directory_entry& item : fs::directory_iterator(dir, error)) {
    const std::string name = item.path().filename().string();
    if (name.rfind(key + "-", 0) != 0 || !item.is_directory(error)) continue;
    // Each check says what it found wrong: the warning names the entry and the reason.
    const auto refuse = [](const std::string& reason) { throw std::runtime_error(reason); };
    try {
      StoreEntry entry;
      entry.dir = item.path().string();
      // Regular files only: a FIFO would block the read.
      for (const char* file : {"index.json", "tokens.i32"})
        if (!fs::is_regular_file(entry.dir + "/" + file))
          refuse(std::string(file) + " is missing or not a regular file");
      std::ifstream index_file(entry.dir + "/index.json");
      const nlohmann::json index = nlohmann::json::parse(index_file, nullptr, /*allow_exceptions=*/false);
      if (index.is_discarded()) refuse("its index.json is not valid JSON");
      if (!index.contains("prompts") || !index["prompts"].is_object() || index["prompts"].size() != 1)
        refuse("its index.json does not list exactly one prompt");
      const auto& listed = *index["prompts"].begin();
      if (!listed.contains("tokens") || !listed["tokens"].is_number_integer() || !listed.contains("tokens_fnv1a") ||
          !listed["tokens_fnv1a"].is_string())
        refuse("its index.json lacks the prompt's tokens or tokens_fnv1a");
      const std::string number = index["prompts"].begin().key();
      if (number.empty() || number.size() > 9 || number.find_first_not_of("0123456789") != std::string::npos)
        refuse("its index.json's prompt \"" + number + "\" is not a prompt number");
      entry.prompt = std::stoi(number);
      entry.tokens = listed["tokens"].get<int64_t>();
      // The ids file's size first: an index claiming a billion tokens allocates nothing.
      const uintmax_t ids_bytes = fs::file_size(entry.dir + "/tokens.i32");
      if (entry.tokens <= 0 || ids_bytes != static_cast<uintmax_t>(entry.tokens) * 4)
        refuse("its tokens.i32 holds " + std::to_string(ids_bytes) + " bytes, but its index.json says " +
               std::to_string(entry.tokens) + " tokens");
      std::ifstream ids_file(entry.dir + "/tokens.i32", std::ios::binary);
      entry.ids.resize(static_cast<size_t>(entry.tokens));
      ids_file.read(reinterpret_cast<char*>(entry.ids.data()), static_cast<std::streamsize>(entry.ids.size() * 4));
      if (!ids_file || ids_file.peek() != std::char_traits<char>::eof()) refuse("its tokens.i32 cannot be read whole");
      entry.tokens_hash = io::Fnv1a().add(entry.ids.data(), entry.ids.size() * sizeof(int32_t)).value;
      if (tokens_hash_text(entry.tokens_hash) != listed["tokens_fnv1a"].get<std::string>())
        refuse("its tokens.i32 does not match the tokens_fnv1a of its index.json (the ids were changed)");
      if (name != entry_name(key, entry.tokens_hash, entry.tokens))
        refuse("its name does not match the tokens it holds (files moved between entries, or renamed)");
      if (index.contains("parent")) {
        if (!index["parent"].is_string() || !index.contains("parent_tokens") ||
            !index["parent_tokens"].is_number_integer())
          refuse("its index.json's parent or parent_tokens is not what it should be");
        entry.parent = index["parent"].get<std::string>();
        entry.first_position = index["parent_tokens"].get<int64_t>();
        if (entry.first_position <= 0 || entry.first_position >= entry.tokens)
          refuse("its index.json's parent_tokens lies outside its tokens");
      }
      entry.lends = entry_scores(entry.dir + "/" + kv_prompt_dir_name(entry.prompt), entry.tokens, false)
                        .value_or(ScoresLayout{});
      entries.push_back(std::move(entry));
    } catch (const std::exception& e) {  // a foreign or damaged directory: never used
      if (unusable) unusable->push_back({name, e.what()});
    }
  }
  return resolve_chains(std::move(entries), unusable);
}

std::map<std::string, int> entries_passed_over(const std::string& dir, const std::string& key,
                                               const std::string& model_identity) {
  std::map<std::string, int> reasons;
  std::error_code error;
  for (const fs::directory_entry& item : fs::directory_iterator(dir, error)) {
    const std::string name = item.path().filename().string();
    if (!is_store_entry_name(name) || name.rfind(key + "-", 0) == 0 || !item.is_directory(error)) continue;
    std::ifstream file(item.path() / "index.json");
    const nlohmann::json index = nlohmann::json::parse(file, nullptr, /*allow_exceptions=*/false);
    if (index.is_discarded() || !index.is_object())
      ++reasons["an unreadable index.json"];
    else if (index.value("model_identity", std::string()) != model_identity)
      ++reasons["another model"];
    else if (!index.contains("precision"))
      ++reasons["an earlier pipefill's layout-keyed format"];
    else
      ++reasons["another precision (" + index.value("precision", std::string()) + ")"];
  }
  return reasons;
}

void remove_abandoned_incoming(const std::string& dir) {
  char host[64] = "host";
  ::gethostname(host, sizeof host - 1);
  std::error_code error;
  for (const fs::directory_entry& item : fs::directory_iterator(dir, error)) {
    const std::string name = item.path().filename().string();
    // Entries moved aside to be removed (an eviction, a replaced damaged entry, kv_store.py's
    // gc) are out of the store's names for good: whoever moved one was removing it, and a kill
    // can leave it half done. (Removed twice at once, each removal ignores what the other took.)
    bool aside = false;
    for (const char* prefix : {".evicting-", ".replaced-", ".deleting-"}) aside = aside || name.rfind(prefix, 0) == 0;
    if (aside) {
      fs::remove_all(item.path(), error);
      continue;
    }
    // .incoming-<host>-<pid>-<ms>: the host may hold dashes, the last two fields do not.
    const std::string prefix = ".incoming-" + std::string(host) + "-";
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rest = name.substr(prefix.size());
    const size_t dash = rest.find('-');
    if (dash == std::string::npos || rest.find('-', dash + 1) != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::atol(rest.substr(0, dash).c_str()));
    if (pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    fs::remove_all(item.path(), error);
  }
}

namespace {

constexpr const char* kInUse = "in_use";

// A POSIX lock on the whole of `fd`, without waiting: true when taken.
bool lock_file(int fd, short type) {
  struct flock lock {};
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  return ::fcntl(fd, F_SETLK, &lock) == 0;
}

double modified_s(const fs::path& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return 0;
  return static_cast<double>(info.st_mtim.tv_sec) + 1e-9 * static_cast<double>(info.st_mtim.tv_nsec);
}

}  // namespace

std::string parent_holding(const std::string& dir, std::string parent, int64_t c) {
  for (int depth = 0; depth < 1000 && !parent.empty(); ++depth) {  // (a chain that loops ends here)
    std::ifstream file(dir + "/" + parent + "/index.json");
    const nlohmann::json index = nlohmann::json::parse(file, nullptr, /*allow_exceptions=*/false);
    if (!file || index.is_discarded() || !index.is_object()) return "";
    if (!index.contains("parent")) return parent;  // holds every row from position 0
    if (!index["parent"].is_string() || !index.contains("parent_tokens") || !index["parent_tokens"].is_number_integer())
      return "";
    if (index["parent_tokens"].get<int64_t>() < c) return parent;
    parent = index["parent"].get<std::string>();
  }
  return "";
}

std::string publish_store_entry(const std::string& dir, const std::string& incoming, const std::string& key, int prompt,
                                const std::vector<int32_t>& ids, uint64_t tokens_hash, const std::string& index_json,
                                const std::set<std::string>& replace) {
  const std::string name = entry_name(key, tokens_hash, static_cast<int64_t>(ids.size()));
  const std::string staging = incoming + "/entry-" + std::to_string(prompt);
  const std::string files = fs::path(kv_file_name(prompt, 0, 0)).parent_path().string();  // prompt-NNNNNN
  std::error_code error;
  fs::create_directories(staging, error);
  if (error) throw std::runtime_error("cannot create " + staging + ": " + error.message());
  fs::rename(incoming + "/" + files, staging + "/" + files, error);
  if (error) throw std::runtime_error("cannot move " + incoming + "/" + files + ": " + error.message());
  io::write_durably(staging + "/tokens.i32", ids.data(), ids.size() * sizeof(int32_t));
  io::write_durably(staging + "/index.json", index_json.data(), index_json.size());
  io::sync_directory(staging + "/" + files);
  io::sync_directory(staging);
  const std::string target = dir + "/" + name;
  if (fs::exists(target, error)) {
    if (replace.count(name) == 0) {  // another run published it first: keep theirs
      fs::remove_all(staging, error);
      return name;
    }
    // Found damaged by this run: moved aside (one rename), then replaced, then removed; under
    // its exclusive lock, so never while another run is using it (that run's own checks then
    // answer for it, and a later run replaces it).
    const int fd = ::open((target + "/" + kInUse).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || !lock_file(fd, F_WRLCK)) {
      if (fd >= 0) ::close(fd);
      fs::remove_all(staging, error);
      return name;
    }
    const std::string aside = dir + "/.replaced-" + name + "-" + std::to_string(::getpid());
    const bool moved = ::rename(target.c_str(), aside.c_str()) == 0;
    const int reason = errno;
    ::close(fd);
    if (!moved) throw std::runtime_error("cannot move the damaged " + target + " aside: " + std::strerror(reason));
    fs::remove_all(aside, error);
  }
  // One rename makes the whole entry visible; if another run renamed theirs in between, the
  // target is a non-empty directory and the rename fails: theirs stays, ours goes.
  if (::rename(staging.c_str(), target.c_str()) != 0) {
    const int reason = errno;
    fs::remove_all(staging, error);
    if (reason != ENOTEMPTY && reason != EEXIST)
      throw std::runtime_error("cannot rename " + staging + " to " + target + ": " + std::strerror(reason));
  }
  io::sync_directory(dir);
  return name;
}

std::optional<EntryUse> EntryUse::take(const std::string& entry_dir) {
  const int fd = ::open((entry_dir + "/" + kInUse).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return std::nullopt;  // gone (evicted), or a store this run cannot write: not used
  // Locked, and still the entry's own file: an eviction between the open and the lock moved
  // the entry aside (its lock released), and this is then the moved one.
  struct stat held {
  }, named{};
  if (!lock_file(fd, F_RDLCK) || ::fstat(fd, &held) != 0 || ::stat((entry_dir + "/" + kInUse).c_str(), &named) != 0 ||
      held.st_ino != named.st_ino || held.st_dev != named.st_dev) {
    ::close(fd);
    return std::nullopt;
  }
  ::futimens(fd, nullptr);  // used now
  return EntryUse(fd);
}

EntryUse::~EntryUse() {
  if (fd_ >= 0) ::close(fd_);  // (closing releases the lock)
}

std::vector<EntryFootprint> store_footprints(const std::string& dir) {
  std::vector<EntryFootprint> entries;
  std::error_code error;
  for (const fs::directory_entry& item : fs::directory_iterator(dir, error)) {
    const std::string name = item.path().filename().string();
    // Only entries: eviction never removes anything else someone keeps in the directory.
    if (!is_store_entry_name(name) || !item.is_directory(error)) continue;
    EntryFootprint entry;
    entry.name = name;
    for (const fs::directory_entry& file : fs::recursive_directory_iterator(item.path(), error))
      if (file.is_regular_file(error)) entry.bytes += file.file_size(error);
    const fs::path in_use = item.path() / kInUse;
    entry.last_used = fs::exists(in_use, error) ? modified_s(in_use) : modified_s(item.path() / "index.json");
    std::ifstream index_file(item.path() / "index.json");
    const nlohmann::json index = nlohmann::json::parse(index_file, nullptr, /*allow_exceptions=*/false);
    if (index.is_object() && index.contains("parent") && index["parent"].is_string())
      entry.parent = index["parent"].get<std::string>();
    entries.push_back(entry);
  }
  return entries;
}

Eviction evict_to_limit(const std::string& dir, uint64_t limit, const std::set<std::string>& keep) {
  std::vector<EntryFootprint> entries = store_footprints(dir);
  std::sort(entries.begin(), entries.end(),
            [](const EntryFootprint& a, const EntryFootprint& b) { return a.last_used < b.last_used; });
  std::map<std::string, std::vector<std::string>> children;
  std::map<std::string, uint64_t> bytes;
  for (const EntryFootprint& entry : entries) {
    if (!entry.parent.empty()) children[entry.parent].push_back(entry.name);
    bytes[entry.name] = entry.bytes;
  }
  Eviction eviction;
  for (const EntryFootprint& entry : entries) eviction.bytes_before += entry.bytes;
  eviction.bytes_after = eviction.bytes_before;
  std::set<std::string> gone;
  for (const EntryFootprint& entry : entries) {
    if (eviction.bytes_after <= limit) break;
    if (gone.count(entry.name)) continue;
    // The entry and every entry built on it, or none of them.
    std::vector<std::string> group = {entry.name};
    for (size_t k = 0; k < group.size(); ++k)
      for (const std::string& child : children[group[k]])
        if (!gone.count(child) && std::find(group.begin(), group.end(), child) == group.end()) group.push_back(child);
    if (std::any_of(group.begin(), group.end(), [&](const std::string& name) { return keep.count(name) > 0; }))
      continue;
    std::vector<int> locks;
    bool free = true;
    for (const std::string& name : group) {
      const int fd = ::open((dir + "/" + name + "/" + kInUse).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (fd >= 0 && lock_file(fd, F_WRLCK)) {
        locks.push_back(fd);
        continue;
      }
      if (fd < 0 && errno == ENOENT) continue;  // gone meanwhile (another run evicted it)
      if (fd >= 0) ::close(fd);                 // a run is using it
      free = false;
      break;
    }
    if (!free) {
      for (int fd : locks) ::close(fd);
      ++eviction.in_use;
      continue;
    }
    // Aside under the locks: a run that lists the store from now on does not see them, one that
    // listed them before fails to lock them and computes those prefixes instead. Children
    // first, so that no entry is ever listed without its parent.
    for (auto name = group.rbegin(); name != group.rend(); ++name) {
      const std::string aside = dir + "/.evicting-" + std::to_string(::getpid()) + "-" + *name;
      if (::rename((dir + "/" + *name).c_str(), aside.c_str()) != 0) continue;
      std::error_code error;
      fs::remove_all(aside, error);
      gone.insert(*name);
      eviction.bytes_after -= bytes[*name];
      eviction.evicted.push_back(*name);
    }
    for (int fd : locks) ::close(fd);
  }
  return eviction;
}

}  // namespace pf::kv
