// What --save-kv and --kv-store directories hold (see kv_directories.hpp).
#include "kvcache/kv_directories.hpp"

#include <filesystem>

#include "errors.hpp"

namespace pf::kv {

namespace fs = std::filesystem;

namespace {

bool all_of(const std::string& text, const char* allowed) {
  return !text.empty() && text.find_first_not_of(allowed) == std::string::npos;
}

std::string model_refusal(const std::string& flag, const std::string& dir) {
  return flag + " " + dir +
         " holds config.json or .safetensors files: a model's directory? give a directory of its own";
}

}  // namespace

bool is_store_entry_name(const std::string& name) {
  constexpr const char* kHex = "0123456789abcdef";
  if (name.size() < 35 || name[16] != '-' || name[33] != '-') return false;
  const std::string tokens = name.substr(34);
  return all_of(name.substr(0, 16), kHex) && all_of(name.substr(17, 16), kHex) && all_of(tokens, "0123456789") &&
         tokens[0] != '0';
}

KvDirectoryContents inspect_kv_directory(const std::string& dir) {
  KvDirectoryContents contents;
  std::error_code error;
  for (const fs::directory_entry& item : fs::directory_iterator(dir, error)) {
    const std::string name = item.path().filename().string();
    std::error_code stat_error;
    if (item.is_directory(stat_error)) {
      if (is_store_entry_name(name)) ++contents.store_entries;
      if (name.rfind("prompt-", 0) == 0 && all_of(name.substr(7), "0123456789")) ++contents.prompt_dirs;
    } else if (name == "index.json") {
      contents.export_index = true;
    } else if (name == "tokens.i32") {
      contents.entry_files = true;
    } else if (name == "config.json" || (name.size() > 12 && name.substr(name.size() - 12) == ".safetensors")) {
      contents.model = true;
    }
  }
  return contents;
}

void require_save_kv_directory(const std::string& dir, bool replace_export) {
  const KvDirectoryContents held = inspect_kv_directory(dir);
  if (held.model) throw UserError(model_refusal("--save-kv", dir));
  if (held.store_entries > 0 || held.entry_files)
    throw UserError("--save-kv " + dir + " is a KV store (--kv-store) or one of its entries: an export needs a " +
                    "directory of its own");
  if (held.export_index && !replace_export)
    throw UserError("--save-kv " + dir +
                    " already holds an export (index.json): add --overwrite to replace it, --resume to continue the "
                    "run that wrote it, or give a new directory");
}

void require_kv_store_directory(const std::string& dir) {
  const KvDirectoryContents held = inspect_kv_directory(dir);
  if (held.model) throw UserError(model_refusal("--kv-store", dir));
  if (held.entry_files)
    throw UserError("--kv-store " + dir + " is one entry of a KV store: give the store's directory, its parent");
  if (held.export_index || held.prompt_dirs > 0)
    throw UserError("--kv-store " + dir +
                    " holds a --save-kv export (index.json, prompt-NNNNNN): a store needs a directory of its own");
}

}  // namespace pf::kv
