// Running cxxopts over argv with our messages: the flag a bad value was given to, a flag
// taken as another's value, unknown flags and stray arguments, all as UserError.
#include "cli/option_table.hpp"

#include <iostream>
#include <map>
#include <set>
#include <sstream>

namespace pf::cli {

std::string shortest(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

namespace {

// The flag that was given `text` as its value: the first `--flag text`, `--flag=text`,
// `-x text` or `-xtext` in argv that fails alone with the same table. Empty if none does
// (a bad default: a bug, not a user error).
std::string flag_given(cxxopts::Options& table, int argc, char** argv, const std::string& text) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-' || arg == "-") continue;
    std::string flag, given;
    const bool is_long = arg[1] == '-';
    const size_t equals = arg.find('=');
    const bool attached = (is_long && equals != std::string::npos) || (!is_long && arg.size() > 2);
    if (is_long && equals != std::string::npos) {
      flag = arg.substr(0, equals);
      given = arg.substr(equals + 1);
    } else if (!is_long && arg.size() > 2) {
      flag = arg.substr(0, 2);
      given = arg.substr(2);
    } else if (i + 1 < argc) {
      flag = arg;
      given = argv[i + 1];
    } else {
      continue;
    }
    if (given != text) continue;
    // Probe in the form given: `--quiet maybe` leaves "maybe" unmatched, `--quiet=maybe` fails.
    const char* probe[] = {"pipefill", argv[i], attached ? nullptr : argv[i + 1]};
    try {
      table.parse(attached ? 2 : 3, probe);
    } catch (const InvalidValue&) {
      return flag;
    } catch (const cxxopts::exceptions::exception&) {
    }
  }
  return "";
}

}  // namespace

void refuse_repeated(const cxxopts::ParseResult& result, const std::set<std::string>& lists) {
  std::map<std::string, std::string> first;
  for (const auto& given : result.arguments()) {
    const auto [seen, added] = first.emplace(given.key(), given.value());
    if (added || lists.count(given.key())) continue;
    const bool flag = given.value() == "true" && seen->second == "true";
    throw UserError("--" + given.key() + " given twice" +
                    (flag ? "" : " (\"" + seen->second + "\" and \"" + given.value() + "\")") +
                    ": give it once (see --help)");
  }
}

std::optional<cxxopts::ParseResult> parse_command_line(cxxopts::Options& table, int argc, char** argv) {
  table.add_options()("h,help", "show this help");
  try {
    auto result = table.parse(argc, argv);
    if (result.count("help")) {
      std::cout << table.help() << std::endl;
      return std::nullopt;
    }
    if (!result.unmatched().empty())
      throw UserError("unexpected argument \"" + result.unmatched().front() + "\" (see --help)");
    return result;
  } catch (const InvalidValue& e) {
    const std::string flag = flag_given(table, argc, argv, e.text);
    if (!flag.empty() && e.text.rfind("--", 0) == 0)  // `--chunk-size --pp 2`: the next flag was taken as the value
      throw UserError(flag + " needs a value (it got the flag \"" + e.text + "\") (see --help)");
    const std::string where = e.element == e.text ? "" : " (in \"" + e.text + "\")";
    throw UserError((flag.empty() ? "" : flag + ": ") + "\"" + e.element + "\" " + e.problem + where + " (see --help)");
  } catch (const cxxopts::exceptions::exception& e) {
    throw UserError(std::string(e.what()) + " (see --help)");
  }
}

}  // namespace pf::cli
