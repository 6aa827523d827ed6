#!/usr/bin/env python3
"""`fa-bench arch` against bench/arch_model.py: on a few shapes (GQA, causal, s_q != s_k, a model
preset, every GPU and pass) the C++ model's JSON rows carry the same times, TFLOP/s and bytes as
the Python module computes, and the same support matrix; its CSV has a line per row; --chart's
SVG bars are the rows' TFLOP/s; --measure times the shape here (the CPU) and labels it measured;
bad input exits 2. Usage: arch_cli_test.py FA_BENCH"""
import csv
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import arch_model as am  # noqa: E402

FA_BENCH = sys.argv[1]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def close(a, b, what):
    if a is None or b is None:
        check(a is None and b is None, f"{what}: {a} vs {b}")
    else:
        check(abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1e-30), f"{what}: C++ {a} vs Python {b}")


def run(args, want_rc=0):
    p = subprocess.run([FA_BENCH, "arch"] + args, capture_output=True, text=True, timeout=60)
    check(p.returncode == want_rc, f"arch {' '.join(args)}: rc {p.returncode}\n{p.stderr}")
    return p


CASES = [
    ["--op", "fwd,bwd,fwdbwd", "-b", "2", "--heads", "16", "-s", "4096", "-d", "128"],
    ["--op", "fwd,bwd", "-b", "8", "--heads", "32", "--kv-heads", "8", "-s", "1000",
     "--seqlen-k", "3000", "-d", "96", "--mask", "causal"],
    ["--op", "fwd,fwdbwd", "--model", "llama-3-8b", "--seqlen", "8192", "--batch", "8"],
    ["--op", "fwd", "--model", "gemma-7b", "-s", "2048", "--dtype", "fp16", "--mask", "full"],
    ["--gpu", "a100-80gb,h200-sxm", "--op", "bwd", "-s", "512", "-d", "64", "--heads", "32"],
]
with tempfile.TemporaryDirectory() as tmp:
    for i, args in enumerate(CASES):
        path, cpath = os.path.join(tmp, f"{i}.json"), os.path.join(tmp, f"{i}.csv")
        p = run(args + ["--json", path, "--csv", cpath])
        check("modeled" in p.stdout.lower(), f"case {i}: the table never says modeled")
        rec = json.load(open(path))
        check(rec["modeled"] is True, f"case {i}: modeled flag")
        gpus = args[args.index("--gpu") + 1].split(",") if "--gpu" in args else list(am.BY_KEY)
        ops = args[args.index("--op") + 1].split(",")
        check(len(rec["rows"]) == len(gpus) * len(ops), f"case {i}: {len(rec['rows'])} rows")
        check([s["gpu"] for s in rec["support"]] == gpus, f"case {i}: support rows")
        for s in rec["support"]:
            g = am.BY_KEY[s["gpu"]]
            check(s["families"] == g["families"], f"{g['key']}: families {s['families']}")
            for op in am.PASSES:
                fam = am.default_family(g, op)
                want = "" if fam is None else am.pass_label(fam, op)
                check(s[op] == want, f"{g['key']} {op}: {s[op]!r} vs {want!r}")
        for r in rec["rows"]:
            g, op, L = am.BY_KEY[r["gpu"]], r["op"], r["layers"]
            shape = (r["b"], r["h"], r["s_q"], r["s_k"], r["d"], r["causal"])
            b, h, s_q, s_k, d, causal = shape
            what = f"case {i} {g['key']} {op}"
            std = am.model_ms(g, "vanilla", op, *shape, r["dtype"], r["h_kv"])
            fl = am.flash_ms(g, op, *shape, r["dtype"], r["h_kv"])
            close(r["standard_ms"], None if std is None else std * L, what + " standard ms")
            close(r["flash_ms"], None if fl is None else fl * L, what + " flash ms")
            flops = am.counted_flops(op, *shape)
            close(r["flash_tflops"], None if fl is None else flops / fl * 1e-9, what + " TFLOP/s")
            m = am.memory_bytes(op, b, h, s_q, s_k, d, h_kv=r["h_kv"])
            close(r["standard_bytes"], m["standard"], what + " standard bytes")
            close(r["flash_bytes"], m["flash"], what + " flash bytes")
            close(r["input_bytes"], m["inputs"], what + " input bytes")
            check(r["dtype"] == (args[args.index("--dtype") + 1] if "--dtype" in args
                                 else am.dtype_of(g)), what + " dtype")
        if "--model" in args:
            check(rec["rows"][0]["layers"] == 32 if "llama-3-8b" in args else 28, "layers")
            check(rec["shape"]["causal"] == ("full" not in args), f"case {i}: the preset's mask")
        with open(cpath, newline="") as f:
            lines = list(csv.DictReader(f))
        check(len(lines) == len(rec["rows"]), f"case {i}: {len(lines)} CSV lines")
        for line, r in zip(lines, rec["rows"]):
            check(line["gpu"] == r["gpu"] and line["op"] == r["op"], f"case {i}: CSV order")
            check((line["flash_ms"] == "") == (r["flash_ms"] is None), f"case {i}: CSV empty cell")
            if r["flash_ms"] is not None:
                close(float(line["flash_ms"]), r["flash_ms"], f"case {i}: CSV flash ms")
    # --chart: an SVG whose bars are the JSON rows' TFLOP/s, standard and flash per row.
    import xml.etree.ElementTree as ET
    svg, path = os.path.join(tmp, "chart.svg"), os.path.join(tmp, "chart.json")
    run(["--op", "fwd,bwd", "-s", "2048", "-d", "128", "--heads", "16", "--chart", svg,
         "--json", path])
    rec = json.load(open(path))
    bars = {}
    for r in ET.parse(svg).iter("{http://www.w3.org/2000/svg}rect"):
        if r.get("class") == "bar":
            bars[(r.get("data-group"), r.get("data-series"))] = float(r.get("data-value"))
    want = {}
    for r in rec["rows"]:
        for series, key in (("standard (modeled)", "standard_tflops"),
                            ("flash (modeled)", "flash_tflops")):
            if r[key] is not None:
                want[(f"{r['op']} {r['gpu']}", series)] = r[key]
    check(set(bars) == set(want), f"chart bars {sorted(set(bars) ^ set(want))[:4]}")
    for k, v in want.items():
        if k in bars:
            close(bars[k], v, f"chart bar {k}")
    # --measure: this machine's standard and flash calls, labelled measured (the CPU here; the
    # model has no CPU row, so no model error), in the table, the JSON and the chart.
    svg, path = os.path.join(tmp, "m.svg"), os.path.join(tmp, "m.json")
    p = run(["--gpu", "h200-sxm", "--op", "fwd,bwd", "-b", "1", "--heads", "2", "-s", "96",
             "-d", "32", "--measure", "--device", "cpu", "--warmup", "1", "--repeats", "2",
             "--json", path, "--chart", svg])
    check("Measured on this machine (cpu)" in p.stdout, "measure: no measured table")
    rec = json.load(open(path))
    m = rec.get("measured", {})
    check(m.get("device") == "cpu" and m.get("gpu") is None, f"measure: device {m.get('device')}")
    rows = m.get("rows", [])
    check([r["op"] for r in rows] == ["fwd", "bwd"], f"measure: rows {rows}")
    for r in rows:
        check(r["modeled"] is False and r["dtype"] == "fp32", f"measure {r['op']}: labels")
        check(r["flash_status"] == "ok" and r["standard_status"] == "ok", f"measure {r['op']}: status")
        check(r["flash_kernel"] == "cpu-flash", f"measure {r['op']}: kernel {r['flash_kernel']}")
        check(r["flash_ms"] > 0 and r["standard_ms"] > 0, f"measure {r['op']}: times")
        check(r["flash_bytes"] < r["standard_bytes"], f"measure {r['op']}: flash needs less memory")
        check(r["model_error"] is None, f"measure {r['op']}: a model error without a model row")
    series = {r.get("data-series") for r in ET.parse(svg).iter("{http://www.w3.org/2000/svg}rect")
              if r.get("class") == "bar"}
    check({"standard (measured here)", "flash (measured here)"} <= series, f"measure chart {series}")
    # The defaults print the support matrix and every GPU.
    p = run([])
    for g in am.GPUS:
        check(g["key"] in p.stdout, f"default run: no {g['key']} row")
    # Bad input: exit 2, naming the flag.
    for bad in (["--gpu", "v100"], ["--model", "gpt-9"], ["--heads", "6", "--kv-heads", "4"],
                ["--model", "gpt2", "--heads", "4"], ["--op", "decode"],
                ["--measure", "--device", "tpu"], ["--measure", "--repeats", "0"]):
        p = run(bad, want_rc=2)
        check(p.stdout == "", f"{bad}: printed a table before failing")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("arch_cli: ok")
