#!/usr/bin/env python3
"""fa-bench end to end on the CPU backends: --help of every subcommand is a man page that
documents every flag, bad input fails (status 2) naming the flag and what it expects and writes
nothing, the CPU defaults finish in seconds, results stream and the live progress line appears on
request, tables carry 3-4 significant figures and GFLOP/s on the CPU, run / sweep / compare write
JSON and CSV (RFC 4180) in shared/BENCH.md's schema (read back here) with each row's kernel family
(fa_select_kernel: the CPU's flashattn runs cpu-flash, its vanilla the fp64 reference,
cpu-reference), plan's figures match a hand computation, and bench/plot.py refuses a plan record.

  cli_test.py PATH/TO/fa-bench [LIMIT_S]
LIMIT_S (default 60) bounds the default `run` on the CPU; a sanitizer build passes more.
"""
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
import time

BIN = sys.argv[1]
LIMIT_S = float(sys.argv[2]) if len(sys.argv) > 2 else 60
PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "plot.py")
ROW_KEYS = {"op", "dtype", "d", "causal", "b", "h", "s_q", "s_k", "backend", "ms", "tflops",
            "peak_bytes", "input_bytes", "h_kv", "device", "status", "kernel"}
# The family each CPU backend runs: fa-bench's vanilla is FA_BACKEND_VANILLA, which the CPU serves
# with its reference.
CPU_KERNELS = {"flashattn": "cpu-flash", "vanilla": "cpu-reference"}
TOP_KEYS = {"gpu", "driver", "cuda", "torch", "cudnn", "commit", "command", "ceilings", "rows"}
FLAGS = {
    "run": ["--backend", "--op", "--dtype", "--batch", "--heads", "--kv-heads", "--seqlen",
            "--seqlen-k", "--head-dim", "--causal", "--device", "--warmup", "--warmup-ms",
            "--repeats", "--json", "--csv", "--commit"],
    "sweep": ["--backend", "--op", "--dtype", "--hidden", "--tokens", "--seqlens", "--dims",
              "--causal", "--device", "--repeats", "--json", "--csv"],
    "compare": ["--op", "--dtype", "--batch", "--heads", "--head-dim", "--seqlens", "--causal",
                "--device", "--repeats", "--json", "--csv"],
    "plan": ["--model", "--list-models", "--layers", "--hidden", "--heads", "--kv-heads",
             "--head-dim", "--batch", "--seqlen", "--dtype", "--mode", "--dropout",
             "--memory-gib", "--json"],
}
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def fa(*args, env_extra=None, timeout=240):
    env = dict(os.environ, OMP_NUM_THREADS="2", **(env_extra or {}))
    return subprocess.run([BIN, *args], capture_output=True, text=True, env=env, timeout=timeout)


def sig_digits(token):
    """Significant digits of a decimal number's text: '61.52' 4, '0.01235' 4, '1054' 4."""
    return len(token.lstrip("-").replace(".", "").lstrip("0"))


def check_figures(line, what):
    """Every number with a fraction in a table line has at most 4 significant digits (integers
    keep their digits)."""
    for tok in re.findall(r"-?\d+\.\d+", line):
        check(sig_digits(tok) <= 4, f"{what}: {tok} has more than 4 significant figures: {line}")


def check_record(path, csv_path, n_rows, device="cpu"):
    with open(path) as f:
        rec = json.load(f)
    check(TOP_KEYS <= rec.keys(), f"{path}: top-level keys {sorted(rec.keys())}")
    check(len(rec["rows"]) == n_rows, f"{path}: {len(rec['rows'])} rows, expected {n_rows}")
    for r in rec["rows"]:
        check(ROW_KEYS <= r.keys(), f"{path}: row keys {sorted(r.keys())}")
        check(r["device"] == device, f"{path}: device {r['device']}")
        check(r["status"] == "ok", f"{path}: status {r['status']}")
        check(r["kernel"] == CPU_KERNELS[r["backend"]], f"{path}: {r['backend']} ran {r['kernel']}")
        check(r["ms"] > 0 and r["tflops"] > 0 and r["peak_bytes"] > 0, f"{path}: figures {r}")
        flops = 4 * r["b"] * r["h"] * r["s_q"] * r["s_k"] * r["d"] / (2 if r["causal"] else 1)
        flops *= {"fwd": 1, "bwd": 2.5, "fwdbwd": 3.5}[r["op"]]
        check(abs(flops / (r["ms"] * 1e-3) / 1e12 - r["tflops"]) <= 1e-3 * r["tflops"],
              f"{path}: tflops {r['tflops']} inconsistent with ms {r['ms']}")
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    check(len(rows) == n_rows, f"{csv_path}: {len(rows)} rows")
    for j, c in zip(rec["rows"], rows):
        check(c["backend"] == j["backend"] and c["kernel"] == j["kernel"] and
              int(c["s_q"]) == j["s_q"] and
              abs(float(c["ms"]) - j["ms"]) <= 1e-5 * j["ms"] + 1e-9, f"{csv_path} vs json: {c} {j}")
    return rec


with tempfile.TemporaryDirectory() as tmp:
    # --help documents every flag of every subcommand.
    r = fa("--help")
    check(r.returncode == 0 and all(s in r.stdout for s in FLAGS), "top-level --help lists subcommands")
    for sub, flags in FLAGS.items():
        r = fa(sub, "--help")
        check(r.returncode == 0, f"{sub} --help exits 0")
        for flag in flags:
            check(flag in r.stdout, f"{sub} --help mentions {flag}")
        for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXIT STATUS"):
            check(f"\n{section}\n" in "\n" + r.stdout, f"{sub} --help has a {section} section")
    check("L * kept + transient" in fa("plan", "--help").stdout, "plan --help explains the formula")
    help_run = fa("run", "--help").stdout
    check("Default: 16 on a GPU, 8 on the CPU." in help_run and "on the CPU" in help_run,
          f"run --help names both device defaults: {help_run}")

    # Bad input: non-zero exit, the flag named, nothing written.
    out = os.path.join(tmp, "bad.json")
    for args, flag in [(["run", "--seqlen", "0", "--json", out], "--seqlen"),
                       (["run", "--dtype", "fp64", "--json", out], "--dtype"),
                       (["run", "--warmup-ms", "-1", "--json", out], "--warmup-ms"),
                       (["run", "--heads", "6", "--kv-heads", "4", "--json", out], "--kv-heads"),
                       (["sweep", "--dims", "48", "--hidden", "100", "--json", out], "--dims"),
                       (["plan", "--model", "nope", "--json", out], "--model"),
                       (["plan", "--layers", "2", "--json", out], "--model"),
                       (["run", "--json", os.path.join(tmp, "no/such/dir/x.json")], "--json"),
                       (["frobnicate"], "subcommand")]:
        r = fa(*args)
        check(r.returncode != 0, f"{args}: exit {r.returncode}")
        check(flag in r.stderr, f"{args}: stderr names {flag}: {r.stderr.strip()[:200]}")
        check(not os.path.exists(out), f"{args}: wrote {out}")

    # ... and says what was expected, in CLI11's place (no "not in range 0.000000 to 1797...").
    for args, message in [(["run", "--heads", "0"], "--heads: must be >= 1, got 0"),
                          (["run", "--seqlen", "abc"], "--seqlen: 'abc' is not an integer"),
                          (["run", "-s", "1e3"], "--seqlen: '1e3' is not an integer"),
                          (["run", "-d", "300"], "--head-dim: must be <= 256, got 300"),
                          (["run", "--warmup-ms", "-1"], "--warmup-ms: must be >= 0, got -1"),
                          (["run", "--repeats", "0"], "--repeats: must be >= 1, got 0"),
                          (["run", "--dtype", "fp64"], "--dtype: must be one of fp32, fp16, bf16; got 'fp64'"),
                          (["run", "--op", "fwd,back"], "--op: must be one of fwd, bwd, fwdbwd; got 'back'"),
                          (["compare", "--seqlens", "512,x"], "--seqlens: 'x' is not an integer"),
                          (["sweep", "--dims", "0"], "--dims: must be >= 1, got 0"),
                          (["plan", "--heads", "0", "--layers", "2", "--hidden", "8"], "--heads: must be >= 1, got 0"),
                          (["plan", "--model", "gpt2", "--memory-gib", "lots"], "--memory-gib: 'lots' is not a number")]:
        r = fa(*args)
        check(r.returncode == 2, f"{args}: exit {r.returncode}, expected 2")
        check(message in r.stderr, f"{args}: stderr says {message!r}: {r.stderr.strip()[:300]}")
        check("1797693" not in r.stderr and "not in range" not in r.stderr,
              f"{args}: CLI11's range text: {r.stderr.strip()[:300]}")
        check("--help" in r.stderr, f"{args}: points to --help: {r.stderr.strip()[:300]}")

    # The CPU defaults: `run` with nothing but the device finishes in seconds (fp32, 8 heads of 64,
    # seqlen 1024, 5 repeats; about 4 s on the 2-core CI machine), its rate in GFLOP/s.
    j = os.path.join(tmp, "defaults.json")
    t0 = time.monotonic()
    r = fa("run", "--device", "cpu", "--json", j, timeout=2 * LIMIT_S)
    took = time.monotonic() - t0
    print(f"fa-bench run --device cpu (defaults): {took:.1f} s")
    check(r.returncode == 0, f"run with defaults: exit {r.returncode} {r.stderr}")
    check(took < LIMIT_S, f"run with the CPU defaults took {took:.0f} s, over {LIMIT_S:.0f} s")
    if r.returncode == 0:
        with open(j) as f:
            rows = json.load(f)["rows"]
        check([(x["backend"], x["op"], x["dtype"], x["h"], x["d"], x["s_q"]) for x in rows] ==
              [("flashattn", "fwd", "fp32", 8, 64, 1024), ("vanilla", "fwd", "fp32", 8, 64, 1024)],
              f"run: the CPU default shape {rows}")
        lines = r.stdout.splitlines()
        check("GFLOP/s" in lines[0] and "TFLOP/s" not in lines[0], f"run: GFLOP/s on the CPU {lines[0]}")
        for line in lines[1:]:
            check_figures(line, "run")
        # (text mode reads the line's \r as a newline: look for its erase-to-end-of-line instead)
        check("\x1b[K" not in r.stderr, f"run: no live progress when stderr is not a terminal {r.stderr!r}")

    # The CPU defaults of compare (seqlens, passes, shape; timed once here) and its estimate.
    j = os.path.join(tmp, "cmp-defaults.json")
    r = fa("compare", "--device", "cpu", "--repeats", "1", "--warmup", "0", "--json", j,
           timeout=2 * LIMIT_S)
    check(r.returncode == 0, f"compare with defaults: exit {r.returncode} {r.stderr}")
    if r.returncode == 0:
        with open(j) as f:
            rec = json.load(f)
        check([(c["op"], c["s"]) for c in rec["compare"]] ==
              [(op, s) for op in ("fwd", "fwdbwd") for s in (256, 512, 1024)],
              f"compare: the CPU default grid {rec['compare']}")
        check(all(x["dtype"] == "fp32" and x["h"] == 8 and x["d"] == 64 for x in rec["rows"]),
              "compare: fp32, 8 heads of 64 on the CPU")
        check(re.search(r"^estimate: 12 cells, about .+", r.stderr, re.M) is not None,
              f"compare: an estimate before the work {r.stderr[:300]}")
        for line in r.stdout.splitlines()[2:]:
            check_figures(line, "compare")
            check(re.search(r"\d+x", line) is not None, f"compare: ratios with an x: {line}")

    # Results stream: the first row is on stdout while the second cell is still being measured.
    proc = subprocess.Popen([BIN, "run", "--device", "cpu", "--backend", "flashattn,vanilla",
                             "--heads", "8", "-s", "512", "-d", "64", "--repeats", "5"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="2"))
    header, first = proc.stdout.readline(), proc.stdout.readline()
    running = proc.poll() is None
    rest = proc.stdout.read()
    proc.wait(timeout=120)
    check(first.split()[9:10] == ["flashattn"] and running,
          f"run: the flashattn row arrives while vanilla is measured ({running}): {first!r}")
    check(rest.split()[9:10] == ["vanilla"], f"run: then the vanilla row {rest!r}")

    # The live progress line, on request: redrawn per repeat, not per cell.
    r = fa("run", "--device", "cpu", "--heads", "2", "-s", "64", "-d", "16", "--repeats", "3",
           "--warmup", "1", "--progress", "on", "--backend", "flashattn")
    check(r.returncode == 0 and "\x1b[K" in r.stderr and "repeat 3/3" in r.stderr and
          "warm-up 1/1" in r.stderr and "left" in r.stderr,
          f"run --progress on: a live line per call {r.stderr!r}")

    # run: both backends, all passes, tiny shape with GQA.
    j, c = os.path.join(tmp, "run.json"), os.path.join(tmp, "run.csv")
    r = fa("run", "--device", "cpu", "--dtype", "fp32", "-b", "1", "--heads", "4", "--kv-heads", "2",
           "-s", "64", "-d", "16", "--op", "fwd,bwd,fwdbwd", "--repeats", "3", "--warmup", "1",
           "--json", j, "--csv", c, "--commit", "abc123")
    check(r.returncode == 0, f"run exit {r.returncode}: {r.stderr}")
    if r.returncode == 0:
        rec = check_record(j, c, 6)
        check(rec["commit"] == "abc123", "run: commit recorded")
        check({x["backend"] for x in rec["rows"]} == {"flashattn", "vanilla"}, "run: backends")
        check(all(x["h_kv"] == 2 for x in rec["rows"]), "run: kv heads recorded")
        table = [line.split() for line in r.stdout.splitlines()]
        check(table[0][9:11] == ["backend", "kernel"] and
              all(row[10] == CPU_KERNELS[row[9]] for row in table[1:]),
              f"run: the table's kernel column {r.stdout}")

    # sweep: the grid's arithmetic (heads = hidden / d, batch = tokens / seqlen).
    j, c = os.path.join(tmp, "sweep.json"), os.path.join(tmp, "sweep.csv")
    r = fa("sweep", "--device", "cpu", "--dtype", "fp32", "--hidden", "64", "--tokens", "128",
           "--seqlens", "32,64", "--dims", "16,32", "--backend", "flashattn", "--op", "fwd",
           "--repeats", "2", "--warmup", "0", "--json", j, "--csv", c)
    check(r.returncode == 0, f"sweep exit {r.returncode}: {r.stderr}")
    check(r.stderr.count("[") >= 8 and "[8/8]" in r.stderr, "sweep: progress on stderr")
    check("flashattn (cpu-flash)" in r.stderr, f"sweep: progress names the kernel {r.stderr}")
    if r.returncode == 0:
        rec = check_record(j, c, 8)
        for x in rec["rows"]:
            check(x["h"] == 64 // x["d"] and x["b"] == 128 // x["s_q"], f"sweep grid: {x}")

    # compare: flash vs vanilla per seqlen, ratios in the JSON.
    j, c = os.path.join(tmp, "cmp.json"), os.path.join(tmp, "cmp.csv")
    r = fa("compare", "--device", "cpu", "--dtype", "fp32", "--heads", "2", "-d", "16",
           "--seqlens", "32,128", "--op", "fwd", "--repeats", "2", "--warmup", "0", "--json", j,
           "--csv", c)
    check(r.returncode == 0, f"compare exit {r.returncode}: {r.stderr}")
    if r.returncode == 0:
        rec = check_record(j, c, 4)
        check(len(rec["compare"]) == 2, "compare: one line per seqlen")
        check("kernels: vanilla cpu-reference, flash cpu-flash" in r.stdout,
              f"compare: the header names the kernels {r.stdout}")
        rows = {(x["backend"], x["s_q"]): x for x in rec["rows"]}
        for line in rec["compare"]:
            v, f = rows[("vanilla", line["s"])], rows[("flashattn", line["s"])]
            check(abs(line["speedup"] - v["ms"] / f["ms"]) <= 1e-4 * line["speedup"], f"speedup {line}")
            call = lambda r: r["peak_bytes"] - r["input_bytes"]  # noqa: E731
            check(0 < f["input_bytes"] < f["peak_bytes"] and v["input_bytes"] == f["input_bytes"],
                  f"input bytes: the same q, k, v for both, part of the peak: {v} {f}")
            check(abs(line["memory_ratio"] - call(v) / call(f)) <= 1e-4 * line["memory_ratio"],
                  f"memory ratio {line}")
            check(abs(line["peak_ratio"] - v["peak_bytes"] / f["peak_bytes"]) <= 1e-4 * line["peak_ratio"],
                  f"peak ratio {line}")
            lo, hi = sorted((1.0, line["memory_ratio"]))
            check(lo <= line["peak_ratio"] <= hi, f"shared inputs pull the peak ratio toward 1 {line}")
        # The reference's score matrices grow with s^2, flash's memory linearly.
        check(rec["compare"][1]["memory_ratio"] > rec["compare"][0]["memory_ratio"],
              "compare: memory ratio grows with seqlen")

    # compare on a shape that cannot fit in host memory (4 TiB tensors): rows, not a crash.
    j, c = os.path.join(tmp, "oom.json"), os.path.join(tmp, "oom.csv")
    r = fa("compare", "--device", "cpu", "--heads", "64", "-d", "256", "--seqlens", "67108864",
           "--op", "fwd", "--repeats", "1", "--warmup", "0", "--json", j, "--csv", c)
    check(r.returncode == 0 and "vanilla oom" in r.stdout and "flash oom" in r.stdout,
          f"compare reports oom rows: {r.returncode} {r.stdout[-400:]} {r.stderr[-400:]}")
    if r.returncode == 0:
        # RFC 4180: the statuses hold commas and come back whole; lines end in CRLF.
        with open(j) as f:
            statuses = [x["status"] for x in json.load(f)["rows"]]
        with open(c, newline="") as f:
            raw = f.read()
        with open(c, newline="") as f:
            rows = list(csv.DictReader(f))
        check(all("," in s for s in statuses), f"oom statuses have commas: {statuses}")
        check([x["status"] for x in rows] == statuses, f"CSV statuses read back whole: {rows}")
        check(raw.count("\r\n") == 3 and '"oom: needs' in raw and ";" not in raw,
              f"CSV quoted, CRLF, no ';' swapped in: {raw!r}")
    # The family is the library's choice, made before the memory check: an oom row names it.
    check("kernels: vanilla cpu-reference, flash cpu-flash" in r.stdout,
          f"compare: oom rows name the family that would run {r.stdout[:400]}")

    # plan: hand-computed Llama-2-7B inference at 4096 (see tests/fa_bench/test_plan.cpp).
    j = os.path.join(tmp, "plan.json")
    r = fa("plan", "--model", "llama-2-7b", "-s", "4096", "--memory-gib", "80", "--json", j)
    check(r.returncode == 0, f"plan exit {r.returncode}: {r.stderr}")
    if r.returncode == 0:
        with open(j) as f:
            p = json.load(f)
        row = p["rows"][0]
        check(row["standard_model"] == 4294967296, f"plan standard model bytes {row}")
        check(row["flash_layer_transient"] == 524288, f"plan flash transient {row}")
        check(0 < p["max_seqlen_standard"] < p["max_seqlen_flash"], f"plan max seqlen {p}")
        # bench/plot.py draws benchmark rows; a plan record is refused with a message (status 2,
        # before matplotlib is needed), not a KeyError.
        r = subprocess.run([sys.executable, PLOT, j, os.path.join(tmp, "png")], capture_output=True,
                           text=True, timeout=60)
        check(r.returncode == 2 and "fa-bench plan" in r.stderr and "Traceback" not in r.stderr,
              f"plot.py refuses a plan record: {r.returncode} {r.stderr}")
        check(not os.path.exists(os.path.join(tmp, "png")), "plot.py made no directory for a refused record")
    r = fa("plan", "--layers", "2", "--hidden", "64", "--heads", "4", "--kv-heads", "2", "-s", "16",
           "--mode", "training")
    # Q = O = 16*64*2 = 2048, K = V = 1024, A = 4*256 = 1024: kept 6144 + 2048, transient 4096
    # per layer 12288 B = 0.0117 MiB; model 2*8192 + 4096 = 20480 B.
    check(r.returncode == 0 and "0.0" in r.stdout, f"plan custom model: {r.stdout} {r.stderr}")
    r = fa("plan", "--list-models")
    check(r.returncode == 0 and "llama-3-70b" in r.stdout and "qwen2-7b" in r.stdout, "plan --list-models")

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
