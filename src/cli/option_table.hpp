// One descriptor per command-line option: flag, help, default, the member it fills, its key in
// the echoed configuration, and which identities it is part of. An OptionTable of them
// generates the parse, --help (cxxopts), the echoed configuration and the identities, so an
// option is declared once (the tables are in options.cpp).
#pragma once

#include <cxxopts.hpp>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cli/checked_value.hpp"
#include "errors.hpp"

namespace pf::cli {

// Which identities an echoed option is part of (bits). The keys that are computed rather than
// given (the model's config, the partition used, fingerprints) are added in run_record.cpp.
enum IdentityPart : unsigned {
  kNoIdentity = 0,
  kRunIdentity = 1u << 0,        // what an output must match to be resumed or accepted as done
  kPlacementIdentity = 1u << 1,  // what a saved cost profile must match to be reused
  // With either part: in it only when the value is not the default. For an option added after
  // outputs were written: those files lack its key, and still resume when it is not given.
  kOnlyWhenSet = 1u << 2,
};

// How a member whose type is not the flag's (an enum, a parsed source) is written on the
// command line: parsed from the flag's text, printed back for --help's default and the echo.
template <typename T>
struct Spelling {
  std::function<T(const std::string&)> parse;  // UserError for a text that names nothing
  std::function<std::string(const T&)> print;
};

// Parses argv with `table` (to which it adds -h/--help), turning cxxopts' exceptions into
// UserError naming the flag; prints the help and returns nullopt when --help was asked for.
std::optional<cxxopts::ParseResult> parse_command_line(cxxopts::Options& table, int argc, char** argv);
// A flag given twice (`--pp 2 ... --pp 4`, often a job script's default and the user's own):
// cxxopts keeps the last silently, so a run could go ahead on the value the user did not
// mean. UserError naming both values, except for the flags in `lists`, given once an element.
void refuse_repeated(const cxxopts::ParseResult& result, const std::set<std::string>& lists);

// A number as a user would write it ("-1", "0.5"), for messages.
std::string shortest(double value);

template <typename Options>
class OptionBase {
 public:
  OptionBase(std::string group, std::string flag, std::string help)
      : group_(std::move(group)), flag_(std::move(flag)), help_(std::move(help)) {}
  virtual ~OptionBase() = default;

  const std::string& group() const { return group_; }  // its --help section ("": the command's own)
  const std::string& flag() const { return flag_; }    // long name, without dashes
  const std::string& help() const { return help_; }
  virtual std::shared_ptr<cxxopts::Value> value() const = 0;  // the flag's type and default
  // Stores the flag's value (or what stands in for it) and checks it.
  virtual void read(const cxxopts::ParseResult& result, Options& options) const = 0;
  virtual const std::string& key() const = 0;  // in the echoed configuration; "" when not echoed
  virtual unsigned identity() const = 0;       // IdentityPart bits
  virtual nlohmann::json echo(const Options& options) const = 0;

 private:
  std::string group_, flag_, help_;
};

// An option that fills one member of type T from a flag of type Flag (T itself, or the text
// of a Spelling). Its default is the member's in a default-constructed Options. The setters
// return the option, so that a table entry reads as one chained statement.
template <typename Options, typename T, typename Flag>
class MemberOption final : public OptionBase<Options> {
 public:
  MemberOption(std::string group, std::string flag, std::string help, T Options::*member, Spelling<T> spelling)
      : OptionBase<Options>(std::move(group), std::move(flag), std::move(help)),
        member_(member),
        spelling_(std::move(spelling)) {}

  // No default: the flag must be given.
  MemberOption& required() {
    absent_ = Absent::kRequired;
    return *this;
  }
  // No default: the member keeps its value unless the flag is given.
  MemberOption& optional() {
    absent_ = Absent::kKeep;
    return *this;
  }
  // No default: when the flag is not given, `fallback` sets the member (an environment
  // variable, a default that depends on another option read before).
  MemberOption& otherwise(std::function<void(Options&)> fallback) {
    absent_ = Absent::kKeep;
    fallback_ = std::move(fallback);
    return *this;
  }
  // Throws UserError when the value read is unusable (run in the order given).
  MemberOption& check(std::function<void(const T&)> check) {
    checks_.push_back(std::move(check));
    return *this;
  }
  // The same, only on a value the user gave: for an optional member whose untouched value
  // means "not given" (0 for "the hardware file's"), a value the check would refuse.
  MemberOption& check_given(std::function<void(const T&)> check) {
    given_checks_.push_back(std::move(check));
    return *this;
  }
  // "--flag must be at least 1 (got 0)"; for a list, each element.
  MemberOption& at_least_one() {
    const std::string flag = this->flag();
    return check([flag](const T& value) {
      auto require = [&flag](long long v) {
        if (v < 1) throw UserError("--" + flag + " must be at least 1 (got " + std::to_string(v) + ")");
      };
      if constexpr (std::is_integral_v<T>) {
        require(value);
      } else {
        for (const auto& element : value) require(element);
      }
    });
  }
  // A rule that follows the value read, whether the flag was given or not.
  MemberOption& then(std::function<void(Options&)> rule) {
    rules_.push_back(std::move(rule));
    return *this;
  }
  // Echoed under `key`, and part of the identities in `parts`.
  MemberOption& echo_as(std::string key, unsigned parts = kNoIdentity) {
    key_ = std::move(key);
    identity_ = parts;
    return *this;
  }

  std::shared_ptr<cxxopts::Value> value() const override {
    auto value = std::make_shared<CheckedValue<Flag>>();
    if (absent_ == Absent::kDefault) value->default_value(default_text());
    return value;
  }

  void read(const cxxopts::ParseResult& result, Options& options) const override {
    const std::string& flag = this->flag();
    if (absent_ == Absent::kDefault || result.count(flag)) {
      if constexpr (std::is_same_v<Flag, T>) {
        options.*member_ = result[flag].template as<T>();
      } else {
        options.*member_ = spelling_.parse(result[flag].template as<Flag>());
      }
    } else if (absent_ == Absent::kRequired) {
      throw UserError("--" + flag + " is required (see --help)");
    } else if (fallback_) {
      fallback_(options);
    }
    if (result.count(flag))
      for (const auto& check : given_checks_) check(options.*member_);
    for (const auto& check : checks_) check(options.*member_);
    for (const auto& rule : rules_) rule(options);
  }

  const std::string& key() const override { return key_; }
  unsigned identity() const override { return identity_; }
  nlohmann::json echo(const Options& options) const override {
    if constexpr (std::is_same_v<Flag, T>) {
      return options.*member_;
    } else {
      return spelling_.print(options.*member_);
    }
  }

 private:
  enum class Absent { kDefault, kRequired, kKeep };

  // The default as --help shows it, and as cxxopts parses it back.
  std::string default_text() const {
    const Options defaults{};
    const T& value = defaults.*member_;
    if constexpr (!std::is_same_v<Flag, T>) {
      return spelling_.print(value);
    } else if constexpr (std::is_same_v<T, bool>) {
      return value ? "true" : "false";
    } else if constexpr (std::is_same_v<T, std::string>) {
      return value;
    } else if constexpr (std::is_arithmetic_v<T>) {
      return std::to_string(value);
    } else {
      throw std::logic_error("--" + this->flag() + ": a list option has no default; make it required or optional");
    }
  }

  T Options::*member_;
  Spelling<T> spelling_;
  Absent absent_ = Absent::kDefault;
  std::function<void(Options&)> fallback_;
  std::vector<std::function<void(const T&)>> checks_, given_checks_;
  std::vector<std::function<void(Options&)>> rules_;
  std::string key_;
  unsigned identity_ = kNoIdentity;
};

// A flag with no member of its own (an alias that sets what another option sets): read by a
// function of the whole parse and its own flag's name, never echoed.
template <typename Options>
class AliasOption final : public OptionBase<Options> {
 public:
  using Read = std::function<void(const cxxopts::ParseResult&, const std::string& flag, Options&)>;
  AliasOption(std::string group, std::string flag, std::string help, std::shared_ptr<cxxopts::Value> value, Read read)
      : OptionBase<Options>(std::move(group), std::move(flag), std::move(help)),
        value_(std::move(value)),
        read_(std::move(read)) {}
  std::shared_ptr<cxxopts::Value> value() const override { return value_->clone(); }
  void read(const cxxopts::ParseResult& result, Options& options) const override {
    read_(result, this->flag(), options);
  }
  const std::string& key() const override { return no_key_; }
  unsigned identity() const override { return kNoIdentity; }
  nlohmann::json echo(const Options&) const override { return nullptr; }

 private:
  std::shared_ptr<cxxopts::Value> value_;
  Read read_;
  std::string no_key_;
};

// An option of a shared table (placement, chunking) seen from a command's options, which
// hold that table's options as one member.
template <typename Options, typename Part>
class PartOption final : public OptionBase<Options> {
 public:
  PartOption(std::shared_ptr<const OptionBase<Part>> option, Part Options::*member)
      : OptionBase<Options>(option->group(), option->flag(), option->help()),
        option_(std::move(option)),
        member_(member) {}
  std::shared_ptr<cxxopts::Value> value() const override { return option_->value(); }
  void read(const cxxopts::ParseResult& result, Options& options) const override {
    option_->read(result, options.*member_);
  }
  const std::string& key() const override { return option_->key(); }
  unsigned identity() const override { return option_->identity(); }
  nlohmann::json echo(const Options& options) const override { return option_->echo(options.*member_); }

 private:
  std::shared_ptr<const OptionBase<Part>> option_;
  Part Options::*member_;
};

// The options of a command (or of a group that several commands share), in --help order.
// Options are read in that order too: a fallback or rule may use the options before it.
template <typename Options>
class OptionTable {
 public:
  explicit OptionTable(std::string group = "") : group_(std::move(group)) {}

  template <typename T>
  MemberOption<Options, T, T>& add(std::string flag, std::string help, T Options::*member) {
    return push(
        std::make_shared<MemberOption<Options, T, T>>(group_, std::move(flag), std::move(help), member, Spelling<T>{}));
  }
  template <typename T>
  MemberOption<Options, T, std::string>& add(std::string flag, std::string help, T Options::*member,
                                             Spelling<T> spelling) {
    return push(std::make_shared<MemberOption<Options, T, std::string>>(group_, std::move(flag), std::move(help),
                                                                        member, std::move(spelling)));
  }
  void add_alias(std::string flag, std::string help, std::shared_ptr<cxxopts::Value> value,
                 typename AliasOption<Options>::Read read) {
    push(std::make_shared<AliasOption<Options>>(group_, std::move(flag), std::move(help), std::move(value),
                                                std::move(read)));
  }
  // Every option of `part` (in its own --help section), filling `member`.
  template <typename Part>
  void include(const OptionTable<Part>& part, Part Options::*member) {
    for (const auto& option : part.options()) push(std::make_shared<PartOption<Options, Part>>(option, member));
  }

  const std::vector<std::shared_ptr<const OptionBase<Options>>>& options() const { return options_; }

  // Fills `options` from argv; false when --help was asked for (the help is printed).
  // UserError for unknown flags, bad values, missing required options and failed checks.
  bool parse(const std::string& program, const std::string& description, int argc, char** argv,
             Options& options) const {
    cxxopts::Options table(program, description);
    std::set<std::string> lists;  // flags given once per element (--length 5000 --length 5100)
    for (const auto& option : options_) {
      const std::shared_ptr<cxxopts::Value> value = option->value();
      if (value->is_container()) lists.insert(option->flag());
      table.add_options(option->group())(option->flag(), option->help(), value);
    }
    const auto result = parse_command_line(table, argc, argv);
    if (!result) return false;
    refuse_repeated(*result, lists);
    for (const auto& option : options_) option->read(*result, options);
    return true;
  }

  // Every echoed option (the configuration rank 0 prints and the output stores).
  nlohmann::json echo(const Options& options) const { return collect(options); }
  // The echoed options that are part of `part`.
  nlohmann::json identity(const Options& options, IdentityPart part) const {
    nlohmann::json json = nlohmann::json::object();
    const Options defaults{};
    for (const auto& option : options_) {
      if (option->key().empty() || !(option->identity() & part)) continue;
      const nlohmann::json value = option->echo(options);
      if ((option->identity() & kOnlyWhenSet) && value == option->echo(defaults)) continue;
      json[option->key()] = value;
    }
    return json;
  }

 private:
  template <typename Option>
  Option& push(std::shared_ptr<Option> option) {
    options_.push_back(option);
    return *option;
  }
  nlohmann::json collect(const Options& options) const {
    nlohmann::json json = nlohmann::json::object();
    for (const auto& option : options_)
      if (!option->key().empty()) json[option->key()] = option->echo(options);
    return json;
  }

  std::string group_;
  std::vector<std::shared_ptr<const OptionBase<Options>>> options_;
};

}  // namespace pf::cli
