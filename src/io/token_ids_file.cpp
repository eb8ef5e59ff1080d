// Reading --token-ids FILE (see token_ids_file.hpp).
#include "io/token_ids_file.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <limits>
#include <sstream>
#include <unordered_map>

#include "errors.hpp"
#include "io/file_checks.hpp"

namespace pf::io {

std::vector<int32_t> read_token_ids(const std::string& path) {
  require_regular_file(path, "--token-ids");
  std::ifstream in(path);
  if (!in) throw UserError("--token-ids " + path + ": cannot be read");
  std::vector<int32_t> ids;
  std::unordered_map<int32_t, int> line_of;  // id -> the line it first appeared on
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = line.substr(0, line.find('#'));
    if (number == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // a UTF-8 byte-order mark
    for (char& c : line)
      if (c == ',' || c == '[' || c == ']') c = ' ';
    std::istringstream words(line);
    for (std::string word; words >> word;) {
      const std::string where = "--token-ids " + path + " line " + std::to_string(number) + ": ";
      const bool digits = std::all_of(word.begin(), word.end(), [](unsigned char c) { return std::isdigit(c); });
      if (!digits)
        throw UserError(where + "'" + word +
                        "' is not a token id (non-negative integers, separated by spaces or commas)");
      const size_t first_digit = std::min(word.find_first_not_of('0'), word.size() - 1);  // "007" is 7
      if (word.size() - first_digit > 10 || std::stoll(word) > std::numeric_limits<int32_t>::max())
        throw UserError(where + word + " is not a token id (too large)");
      const auto id = static_cast<int32_t>(std::stoll(word));
      if (const auto seen = line_of.find(id); seen != line_of.end())
        throw UserError(where + "token " + word + " appears twice (first on line " + std::to_string(seen->second) +
                        "): each column of /token_set_logprobs is one token");
      line_of.emplace(id, number);
      ids.push_back(id);
      if (static_cast<int>(ids.size()) > kMaxTokenSet)
        throw UserError("--token-ids " + path + ": more than " + std::to_string(kMaxTokenSet) +
                        " ids (each adds 4 bytes to every token's row of the output; --top-k keeps the most "
                        "likely tokens instead)");
    }
  }
  if (in.bad()) throw UserError("--token-ids " + path + ": cannot be read");
  if (ids.empty()) throw UserError("--token-ids " + path + ": holds no token ids");
  return ids;
}

void check_token_set(const std::vector<int32_t>& token_set, int vocab_size, const std::string& path) {
  for (size_t i = 0; i < token_set.size(); ++i)
    if (token_set[i] >= vocab_size)
      throw UserError("--token-ids " + path + ": token " + std::to_string(token_set[i]) + " (entry " +
                      std::to_string(i) + ") is not in the model's vocabulary of " + std::to_string(vocab_size) +
                      " tokens");
}

}  // namespace pf::io
