#include "arch_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace fabench {
namespace {

std::string escaped(const std::string& s) {
  std::string out;
  for (const char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += ch;
    }
  }
  return out;
}

// A round axis maximum at or above x (1, 2 or 5 times a power of ten).
double nice_ceiling(double x) {
  if (x <= 0) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(x)));
  for (const double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= x) return m * p;
  return 10 * p;
}

// Distinct fills for up to six series, then they repeat.
const char* const kColors[] = {"#9e9e9e", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"};

}  // namespace

std::string arch_chart_svg(const std::string& title, const std::string& axis,
                           const std::vector<ChartGroup>& groups) {
  std::vector<std::string> series;
  double top = 0;
  for (const ChartGroup& g : groups)
    for (const ChartBar& b : g.bars) {
      if (std::find(series.begin(), series.end(), b.series) == series.end())
        series.push_back(b.series);
      top = std::max(top, b.value);
    }
  const double axis_max = nice_ceiling(top * 1.05);
  constexpr int kLeft = 170, kPlot = 560, kRight = 90, kBar = 12, kGap = 2, kGroupGap = 10;
  constexpr int kTitle = 46, kLegendRow = 18, kAxis = 36;
  int group_h = 0;
  for (const ChartGroup& g : groups)
    group_h += int(g.bars.size()) * (kBar + kGap) + kGroupGap;
  const int plot_top = kTitle, plot_h = group_h;
  const int height = plot_top + plot_h + kAxis + kLegendRow * int(series.size()) + 10;
  const int width = kLeft + kPlot + kRight;
  auto x_of = [&](double v) { return kLeft + kPlot * std::min(v, axis_max) / axis_max; };
  auto color = [&](const std::string& s) {
    const size_t i = size_t(std::find(series.begin(), series.end(), s) - series.begin());
    return kColors[i % (sizeof(kColors) / sizeof(kColors[0]))];
  };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" font-family=\"sans-serif\" font-size=\"11\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"18\" font-size=\"13\" font-weight=\"bold\">{}</text>\n",
      width, height, width, height, 8, escaped(title));
  // Grid lines and ticks at fifths of the axis.
  for (int i = 0; i <= 5; ++i) {
    const double v = axis_max * i / 5, x = x_of(v);
    svg += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"#e0e0e0\"/>\n"
        "<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{:g}</text>\n",
        x, plot_top - 4, x, plot_top + plot_h, x, plot_top + plot_h + 14, v);
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                     kLeft + kPlot / 2, plot_top + plot_h + 30, escaped(axis));
  int y = plot_top;
  for (const ChartGroup& g : groups) {
    const int h = int(g.bars.size()) * (kBar + kGap);
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", kLeft - 6,
                       y + h / 2 + 4, escaped(g.label));
    for (const ChartBar& b : g.bars) {
      if (b.value > 0) {
        const double w = x_of(b.value) - kLeft;
        svg += fmt::format(
            "<rect class=\"bar\" x=\"{}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\" "
            "data-group=\"{}\" data-series=\"{}\" data-value=\"{:.17g}\"><title>{}: {} {:.4g}"
            "</title></rect>\n"
            "<text x=\"{:.1f}\" y=\"{}\">{:.4g}</text>\n",
            kLeft, y, w, kBar, color(b.series), escaped(g.label), escaped(b.series), b.value,
            escaped(g.label), escaped(b.series), b.value, kLeft + w + 3, y + kBar - 2, b.value);
      } else {
        svg += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#757575\">{}: none</text>\n", kLeft + 3,
                           y + kBar - 2, escaped(b.series));
      }
      y += kBar + kGap;
    }
    y += kGroupGap;
  }
  int ly = plot_top + plot_h + kAxis + 4;
  for (const std::string& s : series) {
    svg += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/>"
        "<text x=\"{}\" y=\"{}\">{}</text>\n",
        kLeft, ly, color(s), kLeft + 18, ly + 10, escaped(s));
    ly += kLegendRow;
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace fabench
