// fa-bench arch's pieces that need no process: which model GPU a CUDA device name is, and the
// SVG chart's bars.
#include <gtest/gtest.h>

#include <string>

#include "arch_chart.h"
#include "arch_model.h"

namespace fabench {
namespace {

std::string key_for(const std::string& device) {
  const ArchGpu* g = gpu_for_device(arch_model(), device);
  return g ? g->key : "";
}

TEST(ArchGpuForDevice, CudaNamesMapToTheModelsRows) {
  EXPECT_EQ(key_for("NVIDIA H200"), "h200-sxm");
  EXPECT_EQ(key_for("NVIDIA H100 80GB HBM3"), "h100-sxm");
  EXPECT_EQ(key_for("NVIDIA A100-SXM4-80GB"), "a100-80gb");
  EXPECT_EQ(key_for("NVIDIA A100-SXM4-40GB"), "a100-40gb");
  EXPECT_EQ(key_for("NVIDIA GeForce RTX 4090"), "rtx4090");
  EXPECT_EQ(key_for("NVIDIA GeForce RTX 3090"), "rtx3090");
  EXPECT_EQ(key_for("NVIDIA GeForce RTX 2080 Ti"), "rtx2080ti");
  EXPECT_EQ(key_for("Tesla T4"), "t4");
  // No row: no guess (a word must match whole: "H2000" is not an H200, "RTX 2080" not a Ti).
  EXPECT_EQ(key_for("NVIDIA L40S"), "");
  EXPECT_EQ(key_for("NVIDIA RTX H2000"), "");
  EXPECT_EQ(key_for("NVIDIA GeForce RTX 2080"), "");
  EXPECT_EQ(key_for(""), "");
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(ArchChart, OneRectABarWithItsValueAndEscapedText) {
  const std::string svg = arch_chart_svg(
      "a <title> & more", "TFLOP/s",
      {{"fwd h200-sxm", {{"standard", 40.5}, {"flash", 560.25}}},
       {"bwd h200-sxm", {{"standard", 0}, {"flash", 313.0}}}});
  EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(count(svg, "class=\"bar\""), 3);  // the zero has no bar
  EXPECT_NE(svg.find("data-value=\"560.25\""), std::string::npos);
  EXPECT_NE(svg.find("data-group=\"bwd h200-sxm\" data-series=\"flash\" data-value=\"313\""),
            std::string::npos);
  EXPECT_NE(svg.find("standard: none"), std::string::npos);
  EXPECT_NE(svg.find("a &lt;title&gt; &amp; more"), std::string::npos);
  EXPECT_EQ(svg.find("<title> &"), std::string::npos);
  // The axis is a round number above the largest bar, which stays inside the plot.
  EXPECT_NE(svg.find(">1000</text>"), std::string::npos);
}

}  // namespace
}  // namespace fabench
