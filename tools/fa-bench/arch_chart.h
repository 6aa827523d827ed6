// fa-bench arch --chart: a horizontal bar chart of TFLOP/s as a standalone SVG file (no plotting
// library: the file is a few rectangles and labels). A group per (pass, GPU) row, a bar per
// series in it (standard, flash; measured rows in a series of their own), one linear axis.
#pragma once

#include <string>
#include <vector>

namespace fabench {

struct ChartBar {
  std::string series;  // a legend entry: "standard (modeled)", "flash (modeled)", ...
  double value = 0;    // TFLOP/s; <= 0: no bar (the cell has no figure)
};

struct ChartGroup {
  std::string label;  // "fwd h200-sxm"
  std::vector<ChartBar> bars;
};

// The SVG text: title on top, the groups top to bottom, each bar labelled with its value, a
// legend of the series in first-seen order. Every bar is a <rect class="bar"> carrying
// data-group, data-series and data-value (the value as %.17g), so that a test can read the
// chart back. Text is XML-escaped.
std::string arch_chart_svg(const std::string& title, const std::string& axis,
                           const std::vector<ChartGroup>& groups);

}  // namespace fabench
