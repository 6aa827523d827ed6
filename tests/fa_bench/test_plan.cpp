// fa-bench's planner and record formats, checked against hand-computed figures.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "measure.h"
#include "plan.h"
#include "record.h"

namespace fabench {
namespace {

// Llama-2-7B, batch 1, seqlen 4096, bf16:
//   Q = O = 1*4096*32*128*2 = 33,554,432 B; K = V the same (32 kv heads); A = 32*4096^2 = 536,870,912
//   inference: kept 2*K = 67,108,864; standard transient 2*A*2 = 2,147,483,648;
//              flash transient 32*4096*4 = 524,288
//   model: standard 32*67,108,864 + 2,147,483,648 = 4,294,967,296 (4 GiB)
TEST(FaBenchPlan, Llama2InferenceHandComputed) {
  PlanInput in;
  in.model = *find_preset("Llama-2-7B");
  in.batch = 1;
  in.seqlen = 4096;
  in.elem_bytes = 2;
  const PlanResult r = plan(in);
  EXPECT_DOUBLE_EQ(r.standard.kept, 67108864.0);
  EXPECT_DOUBLE_EQ(r.flash.kept, 67108864.0);
  EXPECT_DOUBLE_EQ(r.standard.transient, 2147483648.0);
  EXPECT_DOUBLE_EQ(r.flash.transient, 524288.0);
  EXPECT_DOUBLE_EQ(r.standard_model, 4294967296.0);
  EXPECT_DOUBLE_EQ(r.flash_model, 32 * 67108864.0 + 524288.0);
}

// Llama-3-8B (8 kv heads), batch 2, seqlen 1024, fp32, training with dropout:
//   Q = O = 2*1024*32*128*4 = 33,554,432; K = V = 2*1024*8*128*4 = 8,388,608;
//   A = 2*32*1024^2 = 67,108,864
//   standard kept = 2*33,554,432 + 2*8,388,608 + 4*A + A = 83,886,080 + 335,544,320 = 419,430,400
//   standard transient = 2*4*A = 536,870,912
//   flash kept = 83,886,080 + 2*32*1024*4 = 84,148,224; flash transient = 2*1024*32*128*4 = 33,554,432
TEST(FaBenchPlan, Llama3TrainingWithDropoutHandComputed) {
  PlanInput in;
  in.model = *find_preset("llama-3-8b");
  in.batch = 2;
  in.seqlen = 1024;
  in.elem_bytes = 4;
  in.training = true;
  in.dropout = true;
  const PlanResult r = plan(in);
  EXPECT_DOUBLE_EQ(r.standard.kept, 419430400.0);
  EXPECT_DOUBLE_EQ(r.standard.transient, 536870912.0);
  EXPECT_DOUBLE_EQ(r.flash.kept, 84148224.0);
  EXPECT_DOUBLE_EQ(r.flash.transient, 33554432.0);
  EXPECT_DOUBLE_EQ(r.standard_model, 32 * 419430400.0 + 536870912.0);
}

TEST(FaBenchPlan, PresetsCarryPublishedShapes) {
  const ModelShape* l70 = find_preset("llama-3-70b");
  ASSERT_NE(l70, nullptr);
  EXPECT_EQ(l70->layers, 80);
  EXPECT_EQ(l70->heads, 64);
  EXPECT_EQ(l70->kv_heads, 8);
  const ModelShape* q = find_preset("qwen2-7b");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->layers, 28);
  EXPECT_EQ(q->kv_heads, 4);
  EXPECT_EQ(find_preset("no-such-model"), nullptr);
  for (const ModelShape& m : model_presets()) {
    EXPECT_EQ(m.heads % m.kv_heads, 0) << m.name;
    // Gemma-7B projects its 3072-wide stream to 16 heads of 256 (4096); the others match.
    if (m.name != "gemma-7b") {
      EXPECT_EQ(m.hidden, m.heads * m.head_dim) << m.name;
    }
  }
}

// The largest fitting seqlen is exact: it fits and one step more does not.
TEST(FaBenchPlan, MaxSeqlenIsTheBoundary) {
  PlanInput in;
  in.model = *find_preset("gpt2");
  in.training = true;
  const double budget = 8.0 * (1 << 30);
  for (bool flash : {false, true}) {
    const int64_t s = max_seqlen(in, budget, flash);
    ASSERT_GT(s, 0);
    in.seqlen = s;
    const PlanResult at = plan(in);
    in.seqlen = s + 128;
    const PlanResult above = plan(in);
    EXPECT_LE(flash ? at.flash_model : at.standard_model, budget);
    EXPECT_GT(flash ? above.flash_model : above.standard_model, budget);
  }
  EXPECT_EQ(max_seqlen(in, 1.0, false), 0);  // nothing fits one byte
}

TEST(FaBenchRecord, FlopsFollowBenchRules) {
  Row r;
  r.op = "fwd";
  r.b = 2; r.h = 3; r.s_q = 5; r.s_k = 7; r.d = 11;
  EXPECT_DOUBLE_EQ(row_flops(r), 4.0 * 2 * 3 * 5 * 7 * 11);
  r.causal = true;
  EXPECT_DOUBLE_EQ(row_flops(r), 2.0 * 2 * 3 * 5 * 7 * 11);
  r.op = "bwd";
  EXPECT_DOUBLE_EQ(row_flops(r), 2.5 * 2.0 * 2 * 3 * 5 * 7 * 11);
  r.op = "fwdbwd";
  EXPECT_DOUBLE_EQ(row_flops(r), 3.5 * 2.0 * 2 * 3 * 5 * 7 * 11);
}

TEST(FaBenchRecord, RowsThatDidNotRunHaveNullFigures) {
  Record rec;
  Row ok, oom;
  ok.op = oom.op = "fwd";
  ok.backend = "flashattn";
  ok.kernel = "cpu-flash";
  ok.ms = 1.5;
  ok.peak_bytes = 1000;
  ok.input_bytes = 600;
  oom.backend = "vanilla";
  oom.status = "oom: needs \"lots\", 1 free";
  rec.rows = {ok, oom};
  const std::string j = to_json(rec);
  EXPECT_NE(j.find("\"ms\": 1.5"), std::string::npos) << j;
  EXPECT_NE(j.find("\"ms\": null"), std::string::npos) << j;
  EXPECT_NE(j.find("\"input_bytes\": 600"), std::string::npos) << j;
  EXPECT_NE(j.find("\"input_bytes\": null"), std::string::npos) << j;
  EXPECT_NE(j.find("oom: needs \\\"lots\\\""), std::string::npos) << j;  // escaped
  EXPECT_NE(j.find("\"kernel\": \"cpu-flash\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"kernel\": null"), std::string::npos) << j;  // no family: null
  const std::string csv = to_csv(rec.rows);
  // RFC 4180: the status with a comma and quotes is one quoted field, its quotes doubled.
  EXPECT_NE(csv.find(",\"oom: needs \"\"lots\"\", 1 free\","), std::string::npos) << csv;
  EXPECT_NE(csv.find(",flashattn,cpu-flash,"), std::string::npos) << csv;
  size_t lines = 0;
  for (size_t at = 0, nl; (nl = csv.find('\n', at)) != std::string::npos; at = nl + 1, ++lines) {
    ASSERT_GT(nl, at);
    EXPECT_EQ(csv[nl - 1], '\r') << "line " << lines << " does not end in CRLF";
    if (lines != 2) {  // the oom row's status holds a comma
      EXPECT_EQ(std::count(csv.begin() + long(at), csv.begin() + long(nl), ','), 16) << csv;
    }
  }
  EXPECT_EQ(lines, 3u);  // header + two rows
}

TEST(FaBenchRecord, CsvFieldsAreQuotedOnlyWhereRfc4180NeedsIt) {
  EXPECT_EQ(csv_field("cpu-flash"), "cpu-flash");
  EXPECT_EQ(csv_field(""), "");
  EXPECT_EQ(csv_field("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(csv_field("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(csv_field("cr\r"), "\"cr\r\"");
}

TEST(FaBenchRecord, MemoryRatioCountsWhatTheCallAddsToItsInputs) {
  Row flash, vanilla;
  flash.peak_bytes = 300;  // 200 of inputs + 100 of output
  flash.input_bytes = 200;
  vanilla.peak_bytes = 1200;  // the same inputs + 1000 of scores and output
  vanilla.input_bytes = 200;
  CompareLine line;
  line.flash = &flash;
  line.vanilla = &vanilla;
  EXPECT_DOUBLE_EQ(line.memory_ratio(), 10.0);
  EXPECT_DOUBLE_EQ(line.peak_ratio(), 4.0);
  vanilla.status = "oom: test";
  EXPECT_EQ(line.memory_ratio(), 0.0);
  EXPECT_EQ(line.peak_ratio(), 0.0);
}

// The driver recorded with a GPU measurement: the kernel module's version from
// /proc/driver/nvidia/version's text (format of the 580 series), "" where there is none.
TEST(FaBenchMachine, DriverVersionFromProcText) {
  EXPECT_EQ(nvidia_driver_version(
                "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release "
                "Build  (dvs-builder@U16-I3-B03-4-3)  Thu Oct 30 2025\nGCC version:  gcc 12\n"),
            "580.159.04");
  EXPECT_EQ(nvidia_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.54.03  Tue"),
            "535.54.03");
  EXPECT_EQ(nvidia_driver_version(""), "");
  EXPECT_EQ(nvidia_driver_version("GCC version: gcc 12"), "");
  EXPECT_EQ(nvidia_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  Release"), "");
}

}  // namespace
}  // namespace fabench
