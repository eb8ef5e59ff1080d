// The KV store (run --kv-store DIR): prompts' KV caches kept across runs, so that a later run
// loads a prefix it shares with an earlier run's prompt instead of computing it (the document
// today, new questions tomorrow), and adds what it computes. Each entry is one prompt's export
// in the layout of --save-kv (kv_export.hpp, docs/formats.md), in a directory of its own:
//
//   DIR/<store key>-<tokens fnv1a>-<tokens>/index.json                 one prompt
//   DIR/<store key>-<tokens fnv1a>-<tokens>/prompt-000007/stage01_tp00.safetensors
//   DIR/<store key>-<tokens fnv1a>-<tokens>/tokens.i32                 its token ids
//   DIR/.incoming-<run>/                                               a run's files being written
//
// A prompt whose prefix another entry holds (a question after a stored document) stores only
// its own rows: its index.json names that entry ("parent") and how many of its rows it takes
// ("parent_tokens"), and its files begin there (first_position). A document asked 16 questions
// is stored once. An entry is used with its whole chain, and evicted with the entries that
// build on it.
//
// The store key hashes the model identity (config and weights) and the cache's precision, not
// the layout: any layout reads any entry, each rank taking the layers and heads it needs from
// whichever files hold them (kv_source.hpp), and one prompt is stored once whatever the
// layouts of the runs that computed it. An entry appears by one rename of its whole directory,
// after every rank's file is complete (fdatasync'd): concurrent runs never see half an entry,
// and when two runs publish the same entry the first stays. A file is used only if its
// metadata name this model and tokens and its data match their checksum (kv_checksum.hpp);
// anything else is recomputed.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "kvcache/entry_scores.hpp"
#include "kvcache/kv_export.hpp"
#include "kvcache/kv_source.hpp"

namespace pf::kv {

// 16 hex digits: the model identity and the cache's precision ("cpu", "cpu-bf16", "cuda").
std::string store_key(const std::string& model_identity, const std::string& precision);

struct StoreEntry {
  std::string dir;  // DIR/<name>
  int prompt = 0;   // the prompt number its files carry (its index.json's key)
  int64_t tokens = 0;
  uint64_t tokens_hash = 0;
  std::vector<int32_t> ids;  // the token ids (rank 0, while planning)
  std::string parent;        // the entry holding rows [0, first_position) ("": none)
  int64_t first_position = 0;
  // Where its rows are: the files of its chain, root first, itself last (kv_source.hpp).
  std::vector<KvSourceFiles> segments;
  std::vector<std::string> chain;  // the chain's directories, root first
  // What it lends to runs that score tokens, as its scores.json says (unverified until the
  // entry is checked; entry_scores.hpp); hidden_rows is set by the run that knows the width.
  ScoresLayout lends;
};

// An entry list_store_entries skipped, and what was wrong with it.
struct UnusableEntry {
  std::string name;
  std::string reason;  // e.g. "its tokens.i32 does not match the tokens_fnv1a of its index.json ..."
};

// Entries of `dir` under `key` whose index.json and tokens.i32 read and agree (the ids'
// hash and count, the entry's name) and whose chain of parents is there and agrees (each holds
// the tokens its child takes from it); `unusable` receives the others (skipped) with the reason.
std::vector<StoreEntry> list_store_entries(const std::string& dir, const std::string& key,
                                           std::vector<UnusableEntry>* unusable);

// The entries of `dir` outside `key` that a run of `model_identity` passes over, counted by
// why: "another model", "another precision (cuda)" (--dtype or the backend differs: the
// results would move by more than float32 rounding), "an earlier pipefill's layout-keyed
// format" (entries written before any layout could read any entry), "an unreadable index.json".
std::map<std::string, int> entries_passed_over(const std::string& dir, const std::string& key,
                                               const std::string& model_identity);

// The name an entry of these tokens has in the store.
std::string store_entry_name(const std::string& key, uint64_t tokens_hash, int64_t tokens);

// Removes the .incoming directories of runs on this host whose process is gone (killed before
// they could clean up; those of other hosts are left to them), and any entry left moved aside
// for removal (.evicting-, .replaced-, .deleting-: a removal a kill interrupted).
void remove_abandoned_incoming(const std::string& dir);

// Moves `incoming`/prompt-NNNNNN (every rank's complete files) into a new entry with
// `index_json` and the ids, then renames it to its place in `dir`, unless an entry of the same
// name is there already (another run's; ours is removed) and not in `replace` (entries this
// run found damaged: moved aside and removed, under their exclusive lock, so not while another
// run uses one). Returns the entry's name, or throws
// std::runtime_error naming what could not be written.
// The entry to name as the parent of a prompt that takes its first `c` tokens from `parent`:
// `parent` itself, or, where the store's copy of it holds its own rows only from c or later
// (another run's, kept when both published it), the nearest entry up its chain that begins
// before c. Empty if the chain breaks (a missing or unreadable index.json).
std::string parent_holding(const std::string& dir, std::string parent, int64_t c);

std::string publish_store_entry(const std::string& dir, const std::string& incoming, const std::string& key, int prompt,
                                const std::vector<int32_t>& ids, uint64_t tokens_hash, const std::string& index_json,
                                const std::set<std::string>& replace);

// Entries in use and the store's size limit (--kv-store-limit). A run that loads an entry holds
// a shared lock (POSIX, so it holds across nodes of a shared file system that supports them)
// on the entry's `in_use` file from before it checks the entry until it ends, and marks the
// entry used (the file's modification time: the store is least recently used first). A run
// that evicts takes the exclusive lock without waiting, so it passes over any entry a run is
// using; it then moves the entry aside (one rename) and removes it.
class EntryUse {
 public:
  // The lock on `entry_dir` (DIR/<name>); nullopt when an eviction holds it (the entry is
  // going: not to be used).
  static std::optional<EntryUse> take(const std::string& entry_dir);
  EntryUse(EntryUse&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  EntryUse& operator=(EntryUse&&) = delete;
  EntryUse(const EntryUse&) = delete;
  ~EntryUse();

 private:
  explicit EntryUse(int fd) : fd_(fd) {}
  int fd_;
};

// The bytes an entry holds, and when it was last used (or published).
struct EntryFootprint {
  std::string name;
  uint64_t bytes = 0;
  double last_used = 0;  // seconds since the epoch
  std::string parent;    // the entry it takes its prefix from ("": none)
};
std::vector<EntryFootprint> store_footprints(const std::string& dir);  // every entry of every layout

struct Eviction {
  uint64_t bytes_before = 0, bytes_after = 0;
  std::vector<std::string> evicted;  // names, least recently used first
  int in_use = 0;                    // entries passed over because a run is using them
};
// Removes the least recently used entries of `dir` not in `keep` and not in use until the
// entries hold at most `limit` bytes (or none is left to remove). An entry goes with every entry
// built on it (its descendants), or not at all.
Eviction evict_to_limit(const std::string& dir, uint64_t limit, const std::set<std::string>& keep);

}  // namespace pf::kv
