// What a directory named by --save-kv or --kv-store already holds. Each writer names its own
// files (docs/formats.md): a run must not write an export among a store's entries, a store's
// entries into an export or a model, nor replace an earlier export without being asked.
#pragma once

#include <string>

namespace pf::kv {

struct KvDirectoryContents {
  bool export_index = false;  // index.json at the top: a finished --save-kv export (or a store's entry)
  bool entry_files = false;   // tokens.i32 beside it: one entry of a store
  int prompt_dirs = 0;        // prompt-NNNNNN directories: an export's (or an entry's) files
  int store_entries = 0;      // <store key>-<tokens_fnv1a>-<tokens> directories: a --kv-store
  bool model = false;         // config.json or *.safetensors at the top: a model's directory
};

// "<16 hex>-<16 hex>-<tokens>": the only names a store's runs and tools treat as its entries
// (list, load, evict, remove); anything else in the directory is left alone.
bool is_store_entry_name(const std::string& name);

KvDirectoryContents inspect_kv_directory(const std::string& dir);  // a missing directory: nothing

// UserError when `dir` holds what another role wrote. --save-kv refuses a model's directory, a
// store or one of its entries, and an earlier export unless `replace_export` (--overwrite, or
// --resume continuing it); --kv-store refuses a model's directory, an export and a store's entry.
void require_save_kv_directory(const std::string& dir, bool replace_export);
void require_kv_store_directory(const std::string& dir);

}  // namespace pf::kv
