// The tools' shared text and command-line helpers (tools/common): significant figures, tables,
// wrapping, and the validators' messages.
#include <gtest/gtest.h>

#include <string>

#include "cli.h"
#include "text.h"

namespace fatools {
namespace {

TEST(ToolsText, SignificantFiguresWithoutExponent) {
  EXPECT_EQ(sig(61.522), "61.52");
  EXPECT_EQ(sig(1054.351), "1054");
  EXPECT_EQ(sig(123456.7), "123457");  // integer digits are kept
  EXPECT_EQ(sig(0.0123456), "0.01235");
  EXPECT_EQ(sig(9.99996), "10.00");  // rounding carries into a new digit
  EXPECT_EQ(sig(-2.5), "-2.500");
  EXPECT_EQ(sig(0.0), "0");
  EXPECT_EQ(sig(13.84, 3), "13.8");
  EXPECT_EQ(sig(1.0 / 0.0), "-");
  EXPECT_EQ(times(13.84), "13.8x");
  EXPECT_EQ(times(0), "-");
  EXPECT_EQ(mib(1024.0 * 1024.0 * 1.5), "1.500");
}

TEST(ToolsText, TableAlignsAndStreams) {
  const Table t({{"name", 6, true}, {"ms", 5}, {"note", 0, true}});
  EXPECT_EQ(t.header(), "name      ms note\n");
  EXPECT_EQ(t.row({"fwd", "1.5", "ok"}), "fwd      1.5 ok\n");
  EXPECT_EQ(t.row({"much-longer", "1", ""}), "much-longer     1\n");  // pushes the rest right
}

TEST(ToolsText, WrapKeepsPreformattedLines) {
  EXPECT_EQ(wrap("aaa bbb ccc", 2, 10), "  aaa bbb\n  ccc\n");
  EXPECT_EQ(wrap(" keep   this\n\nx", 1, 8), "  keep   this\n\n x\n");
}

// What a validator says about a value: "" when accepted.
std::string verdict(const CLI::Validator& v, std::string value) { return v(value); }

TEST(ToolsCli, ValidatorsSayWhatWasExpected) {
  EXPECT_EQ(verdict(integer(1), "0"), "must be >= 1, got 0");
  EXPECT_EQ(verdict(integer(1), "abc"), "'abc' is not an integer");
  EXPECT_EQ(verdict(integer(1), "12x"), "'12x' is not an integer");
  EXPECT_EQ(verdict(integer(1), "99999999999999999999"), "'99999999999999999999' is not an integer");
  EXPECT_EQ(verdict(integer(1, 256), "257"), "must be <= 256, got 257");
  EXPECT_EQ(verdict(integer(1, 256), "256"), "");
  EXPECT_EQ(verdict(number(0), "-1"), "must be >= 0, got -1");
  EXPECT_EQ(verdict(number(0), "nan"), "'nan' is not a number");
  EXPECT_EQ(verdict(number(0), "2.5"), "");
  EXPECT_EQ(verdict(positive_number(), "0"), "must be > 0, got 0");
  EXPECT_EQ(verdict(positive_number(), "-3"), "must be > 0, got -3");
  EXPECT_EQ(verdict(positive_number(), "x"), "'x' is not a number");
  EXPECT_EQ(verdict(positive_number(), "0.5"), "");
  EXPECT_EQ(verdict(one_of({"fp32", "bf16"}), "fp64"), "must be one of fp32, bf16; got 'fp64'");
  EXPECT_EQ(verdict(one_of({"fp32", "bf16"}), "bf16"), "");
}

TEST(ToolsCli, HelpIsAManPageAndErrorsExitTwo) {
  CLI::App app{"does a thing", "prog"};
  setup(app, {{"prog", {"Longer text.", {{"EXIT STATUS", "0 fine."}}}}});
  int64_t n = 1;
  app.add_option("-n,--count", n, "how many.")->check(integer(1))->type_name("N")->capture_default_str();
  const std::string help = app.help();
  for (const char* part : {"NAME\n       prog - does a thing", "SYNOPSIS\n       prog [OPTIONS]",
                           "DESCRIPTION\n       Longer text.", "OPTIONS\n", "-n, --count N\n",
                           "how many. Default: 1.", "EXIT STATUS\n       0 fine."})
    EXPECT_NE(help.find(part), std::string::npos) << part << " in\n" << help;
  const char* bad[] = {"prog", "--count", "0"};
  testing::internal::CaptureStderr();
  EXPECT_EQ(parse(app, 3, const_cast<char**>(bad)), 2);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("prog: --count: must be >= 1, got 0"), std::string::npos) << err;
}

}  // namespace
}  // namespace fatools
