#!/usr/bin/env python3
"""fa-demo's and fa-cpu-bench's command lines (CLI11, tools/common/cli.h): --help is a man page
listing every flag, bad input exits with status 2 saying what was expected, and a tiny run of
each works; fa-cpu-bench's JSON (nlohmann-json) reads back with the documented fields.

  programs_test.py PATH/TO/fa-demo PATH/TO/fa-cpu-bench
"""
import json
import os
import subprocess
import sys
import tempfile

DEMO, CPU_BENCH = sys.argv[1], sys.argv[2]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(*args):
    env = dict(os.environ, OMP_NUM_THREADS="2")
    return subprocess.run(list(args), capture_output=True, text=True, env=env, timeout=240)


for prog, flags in [(DEMO, ["--quick", "--help"]),
                    (CPU_BENCH, ["--dtype", "--batch", "--heads", "--seqlen", "--head-dim", "--causal",
                                 "--repeats", "--with-reference", "--no-speed", "--memory-seqlens",
                                 "--max-reference-seqlen", "--no-memory", "--no-check", "--no-ceiling",
                                 "--json"])]:
    r = run(prog, "--help")
    name = os.path.basename(prog)
    check(r.returncode == 0, f"{name} --help exits 0")
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXIT STATUS"):
        check(f"\n{section}\n" in "\n" + r.stdout, f"{name} --help has {section}")
    for flag in flags:
        check(flag in r.stdout, f"{name} --help mentions {flag}")

for args, message in [([DEMO, "--fast"], "--fast"),
                      ([CPU_BENCH, "--heads", "0"], "--heads: must be >= 1, got 0"),
                      ([CPU_BENCH, "-s", "abc"], "--seqlen: 'abc' is not an integer"),
                      ([CPU_BENCH, "--memory-seqlens", "1024,x"], "--memory-seqlens: 'x' is not an integer"),
                      ([CPU_BENCH, "--dtype", "fp8"], "--dtype: must be one of fp32, fp16, bf16; got 'fp8'"),
                      ([CPU_BENCH, "--bogus"], "--bogus")]:
    r = run(*args)
    check(r.returncode == 2, f"{args[1:]}: exit {r.returncode}, expected 2")
    check(message in r.stderr and "--help" in r.stderr,
          f"{args[1:]}: stderr says {message!r}: {r.stderr.strip()[:300]}")

r = run(DEMO, "--quick")
check(r.returncode == 0 and "PASS: CPU flash backend" in r.stdout, f"fa-demo --quick: {r.stdout} {r.stderr}")

with tempfile.TemporaryDirectory() as tmp:
    j = os.path.join(tmp, "cpu.json")
    r = run(CPU_BENCH, "--no-ceiling", "-s", "128", "--heads", "2", "--repeats", "2",
            "--memory-seqlens", "128,256", "--max-reference-seqlen", "128", "--json", j)
    check(r.returncode == 0, f"fa-cpu-bench tiny run: exit {r.returncode} {r.stdout[-600:]} {r.stderr}")
    if r.returncode == 0:
        with open(j) as f:
            rec = json.load(f)
        check({"machine", "library", "command", "ceilings", "rows"} <= rec.keys(), f"keys {rec.keys()}")
        ops = [(x["op"], x["backend"], x["s"]) for x in rec["rows"]]
        check(ops == [("fwd", "flash", 128), ("bwd", "flash", 128), ("fwdbwd", "flash", 128),
                      ("fwdbwd", "flash", 256), ("fwdbwd", "reference", 128),
                      ("fwdbwd", "reference", 256)], f"rows {ops}")
        speed, skipped = rec["rows"][0], rec["rows"][-1]
        check(speed["ms"] > 0 and speed["gflops"] > 0 and speed["peak_rss_bytes"] is None,
              f"a speed row {speed}")
        check(skipped["ms"] is None and "max-reference-seqlen" in skipped["note"] and
              skipped["workspace_bytes"] > 0, f"a row not run carries its note and sizes {skipped}")
        check(rec["rows"][2]["peak_rss_bytes"] > 0, f"a memory row {rec['rows'][2]}")

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
