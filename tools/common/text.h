// Text output shared by the tools (fa-bench, fa-demo, fa-cpu-bench), on {fmt}: numbers to a few
// significant figures, fixed-width tables printed a row at a time (so results stream as they
// come), and paragraphs wrapped for --help pages.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace fatools {

// x to `digits` significant figures in fixed notation, never an exponent: 61.522 -> "61.52",
// 1054.35 -> "1054", 0.0123456 -> "0.01235", 123456 -> "123456" (integer digits are kept);
// 0 -> "0", a non-finite value -> "-".
inline std::string sig(double x, int digits = 4) {
  if (!std::isfinite(x)) return "-";
  if (x == 0) return "0";
  if (std::fabs(x) >= std::pow(10.0, digits - 1)) return fmt::format("{:.0f}", x);
  // Round first, so that 9.9996 counts as the two-digit 10.00, not 10.000.
  const double rounded = std::strtod(fmt::format("{:.{}e}", x, digits - 1).c_str(), nullptr);
  const int magnitude = int(std::floor(std::log10(std::fabs(rounded))));
  return fmt::format("{:.{}f}", rounded, std::max(0, digits - 1 - magnitude));
}

// Bytes in MiB to 4 significant figures.
inline std::string mib(double bytes) { return sig(bytes / (1024.0 * 1024.0)); }

// A ratio to 3 significant figures with an "x": 13.8x, 0.512x; "-" where it is unknown (<= 0).
inline std::string times(double ratio) { return ratio > 0 ? sig(ratio, 3) + "x" : "-"; }

struct Column {
  std::string title;
  int width = 0;      // at least the title's width; a wider cell pushes the rest of its row right
  bool left = false;  // text columns are left-aligned, numbers right-aligned
};

// A table whose widths are fixed up front, so that each row prints the moment it is known.
class Table {
 public:
  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {
    for (Column& c : columns_) c.width = std::max<int>(c.width, int(c.title.size()));
  }
  std::string header() const {
    std::vector<std::string> titles;
    for (const Column& c : columns_) titles.push_back(c.title);
    return row(titles);
  }
  // One line (with its newline); cells beyond the columns are appended as they are.
  std::string row(const std::vector<std::string>& cells) const {
    std::string out;
    for (size_t i = 0; i < cells.size(); ++i) {
      if (i) out += ' ';
      if (i >= columns_.size()) {
        out += cells[i];
        continue;
      }
      const Column& c = columns_[i];
      const bool last = i + 1 == cells.size();
      if (c.left)
        out += last ? cells[i] : fmt::format("{:<{}}", cells[i], c.width);
      else
        out += fmt::format("{:>{}}", cells[i], c.width);
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();  // an empty last cell
    return out + '\n';
  }

 private:
  std::vector<Column> columns_;
};

// `text` wrapped to `width` columns, every line indented by `indent` spaces. Lines are
// paragraphs, wrapped at spaces; a line that starts with a space is preformatted (a command, a
// formula) and kept as it is; empty lines are kept.
inline std::string wrap(const std::string& text, int indent, int width = 80) {
  const std::string pad(size_t(indent), ' ');
  std::string out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) {
      out += '\n';
      continue;
    }
    if (line[0] == ' ') {
      out += pad + line + '\n';
      continue;
    }
    std::istringstream words(line);
    std::string current;
    for (std::string w; words >> w;) {
      if (!current.empty() && int(pad.size() + current.size() + 1 + w.size()) > width) {
        out += pad + current + '\n';
        current.clear();
      }
      current += (current.empty() ? "" : " ") + w;
    }
    out += pad + current + '\n';
  }
  return out;
}

}  // namespace fatools
