// Command lines of the tools (fa-bench, fa-demo, fa-cpu-bench, fa-onnx-fuse), on CLI11:
//   - validators whose errors say what was expected and what was given ("--heads: must be >= 1,
//     got 0", "--seqlen: 'abc' is not an integer") instead of CLI11's range text;
//   - --help laid out as a man page (NAME, SYNOPSIS, DESCRIPTION, COMMANDS, OPTIONS and the
//     program's own sections);
//   - parse(): usage errors print "PROGRAM: message" and a pointer to --help, and exit with 2.
#pragma once

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (format.h in fmt 9, ranges.h from 11)

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text.h"

namespace fatools {

// A whole decimal integer (optional sign, no spaces) that fits int64_t.
inline bool parse_int(const std::string& s, int64_t* out) {
  if (s.empty() || s.find_first_of(" \t") != std::string::npos) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

// An integer in [lo, hi]. The help shows the range in the option's own text, so the validator
// adds nothing to its type name.
inline CLI::Validator integer(int64_t lo, int64_t hi = std::numeric_limits<int64_t>::max()) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        int64_t v = 0;
        if (!parse_int(s, &v)) return fmt::format("'{}' is not an integer", s);
        if (v < lo) return fmt::format("must be >= {}, got {}", lo, v);
        if (v > hi) return fmt::format("must be <= {}, got {}", hi, v);
        return "";
      },
      "");
}

// A finite number in [lo, hi].
inline CLI::Validator number(double lo, double hi = std::numeric_limits<double>::max()) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = s.empty() ? NAN : std::strtod(s.c_str(), &end);
        if (s.empty() || *end != '\0' || !std::isfinite(v))
          return fmt::format("'{}' is not a number", s);
        if (v < lo) return fmt::format("must be >= {}, got {}", lo, s);
        if (v > hi) return fmt::format("must be <= {}, got {}", hi, s);
        return "";
      },
      "");
}

// A finite number > 0.
inline CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        const std::string err = number(0)(s);
        if (!err.empty()) return err.rfind("must", 0) == 0 ? fmt::format("must be > 0, got {}", s) : err;
        return std::strtod(s.c_str(), nullptr) > 0 ? "" : fmt::format("must be > 0, got {}", s);
      },
      "");
}

// One of `choices`.
inline CLI::Validator one_of(std::vector<std::string> choices) {
  return CLI::Validator(
      [choices](std::string& s) -> std::string {
        for (const std::string& c : choices)
          if (s == c) return "";
        return fmt::format("must be one of {}; got '{}'", fmt::join(choices, ", "), s);
      },
      "");
}

// A path written at the end: its directory must exist and be writable now, so that a long run
// never ends in an unwritable file.
inline CLI::Validator writable() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        const size_t slash = path.find_last_of('/');
        const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
        if (access(dir.c_str(), W_OK) != 0) return fmt::format("directory '{}' is not writable", dir);
        return "";
      },
      "");
}

// The sections of a --help page that CLI11 does not hold. The description is wrapped (a line
// that starts with a space is kept as it is); the other sections are titled and indented.
struct ManPage {
  std::string description;
  std::vector<std::pair<std::string, std::string>> sections;  // (TITLE, text), after OPTIONS
};

// --help as a man page. `pages` is keyed by the command's full name ("fa-bench run").
class ManFormatter : public CLI::FormatterBase {
 public:
  explicit ManFormatter(std::map<std::string, ManPage> pages) : pages_(std::move(pages)) {}

  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode) const override {
    constexpr int kText = 7, kOptionText = 14;  // man(1)'s indents
    const auto page = pages_.find(name);
    std::string out = "NAME\n" + wrap(name + " - " + app->get_description(), kText) + "\n";
    const auto subs = app->get_subcommands([](const CLI::App*) { return true; });
    std::string positionals;  // after the options, as man pages write them
    for (const CLI::Option* opt : app->get_options())
      if (opt->get_positional() && !opt->get_group().empty()) positionals += " " + opt->get_name(true);
    out += "SYNOPSIS\n" + std::string(kText, ' ') + name + (subs.empty() ? "" : " COMMAND") +
           " [OPTIONS]" + positionals + "\n\n";
    if (page != pages_.end() && !page->second.description.empty())
      out += "DESCRIPTION\n" + wrap(page->second.description, kText) + "\n";
    if (!subs.empty()) {
      out += "COMMANDS\n";
      for (const CLI::App* sub : subs)
        out += std::string(kText, ' ') + sub->get_name() + "\n" +
               wrap(sub->get_description(), kOptionText);
      out += wrap("'" + name + " COMMAND --help' describes each command's options.", kText) + "\n";
    }
    out += "OPTIONS\n";
    for (const CLI::Option* opt : app->get_options()) {
      if (opt->get_group().empty()) continue;  // hidden
      std::string names = opt->get_name(false, true);
      for (size_t at = 0; (at = names.find(',', at)) != std::string::npos; at += 2)
        names.replace(at, 1, ", ");
      // Options that take a value have a type name (the tools set one each); flags have none.
      if (!opt->get_type_name().empty()) names += " " + opt->get_type_name();
      std::string text = opt->get_description();
      if (!opt->get_default_str().empty()) text += fmt::format(" Default: {}.", opt->get_default_str());
      out += std::string(kText, ' ') + names + "\n" + wrap(text, kOptionText);
    }
    if (page != pages_.end())
      for (const auto& [title, text] : page->second.sections) out += "\n" + title + "\n" + wrap(text, kText);
    if (!app->get_footer().empty()) out += "\n" + wrap(app->get_footer(), kText);
    return out;
  }

 private:
  std::map<std::string, ManPage> pages_;
};

// Sets the man-page layout and the error format on a program's top-level App; call before adding
// subcommands (they inherit both).
inline void setup(CLI::App& app, std::map<std::string, ManPage> pages) {
  app.formatter(std::make_shared<ManFormatter>(std::move(pages)));
  app.failure_message([](const CLI::App* top, const CLI::Error& e) {
    std::string where = top->get_name();
    for (const CLI::App* sub : top->get_subcommands()) where += " " + sub->get_name();
    return fmt::format("{}: {}\nRun '{} --help' for the options.\n", top->get_name(), e.what(), where);
  });
}

// Parses the command line: -1 when the program should go on, else its exit status (0 after
// --help, 2 after a usage error, which is printed on stderr).
inline int parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return -1;
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
}

}  // namespace fatools
