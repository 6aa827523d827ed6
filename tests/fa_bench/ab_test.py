#!/usr/bin/env python3
"""bench/ab.sh's control flow on stand-ins for cmake and python3 (they log their arguments):
both modes build the unchanged library and each variant (a patch that does not apply is left
out; a cmake variant's arguments reach its configure step, split at spaces), then time them all
in one gpu_bench.py run per argument set of FA_AB_BENCH_ARGS, the unchanged build as --lib and
every variant as a --lib-variant, and FA_AB_KERNEL_TIMES runs profile_kernels.py for every
build in both dtypes. Nothing is built or timed."""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
AB = os.path.join(ROOT, "bench", "ab.sh")
STUB = """#!/bin/sh
IFS='|'
printf '{tool} %s\\n' "$*" >> "{log}"
case "$*" in *profile_kernels.py*) echo "== stand-in case" ;; esac
"""
GOOD = """--- /dev/null
+++ b/ab-test-new-file.txt
@@ -0,0 +1 @@
+a file the patch adds
"""
BAD = """--- a/no-such-file.txt
+++ b/no-such-file.txt
@@ -1 +1 @@
-old
+new
"""

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def run(tmp, args, env):
    """ab.sh with the stand-ins first in PATH: (rc, stdout + stderr, {tool: [argument lines]}),
    the arguments of a line separated by '|'."""
    log = os.path.join(tmp, "log")
    if os.path.exists(log):
        os.remove(log)
    binary = os.path.join(tmp, "bin")
    os.makedirs(binary, exist_ok=True)
    for tool in ("cmake", "python3"):
        path = os.path.join(binary, tool)
        with open(path, "w") as f:
            f.write(STUB.format(log=log, tool=tool))
        os.chmod(path, 0o755)
    env = dict(os.environ, PATH=binary + os.pathsep + os.environ["PATH"], TMPDIR=tmp, **env)
    for k in ("FA_AB_BASE_LIB", "FA_AB_TEST_FILTER", "FA_AB_HEAD_DIMS"):
        if k not in env or not env[k]:
            env.pop(k, None)
    r = subprocess.run(["bash", AB] + args, cwd=tmp, env=env, capture_output=True, text=True,
                       timeout=120)
    calls = {"cmake": [], "python3": []}
    if os.path.exists(log):
        for line in open(log):
            tool, _, rest = line.rstrip("\n").partition(" ")
            calls[tool].append(rest.replace("|", " ") if tool == "python3" else rest)
    return r.returncode, r.stdout + r.stderr, calls


with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "out")
    for name, text in (("good", GOOD), ("bad", BAD)):
        with open(os.path.join(tmp, f"{name}.patch"), "w") as f:
            f.write(text)
    rc, text, calls = run(tmp, ["patch", out, os.path.join(tmp, "good.patch"),
                                os.path.join(tmp, "bad.patch")],
                          {"FA_AB_BENCH_ARGS": "--op bwd;--dims 64",
                           "FA_AB_KERNEL_TIMES": "64:1024:0", "FA_AB_HEAD_DIMS": "64;128"})
    check(rc == 0, f"patch mode: rc {rc}: {text}")
    check("bad: does not apply" in text, f"patch mode: the bad patch not reported: {text}")
    builds = [c for c in calls["cmake"] if c.startswith("-S|")]
    check(len(builds) == 2, f"patch mode: {len(builds)} configure steps, not 2: {builds}")
    base = os.path.join(ROOT, "build-ab-base")
    check(any(f"|-B|{base}|" in c for c in builds), f"patch mode: base not built in {base}")
    check(all("|-DFA_HEAD_DIMS=64;128" in c for c in builds), "patch mode: FA_AB_HEAD_DIMS lost")
    copies = [d for d in os.listdir(tmp) if d.startswith("ab-good.")]
    check(len(copies) == 1 and os.path.exists(os.path.join(tmp, copies[0], "ab-test-new-file.txt")),
          f"patch mode: no patched copy of the tree under TMPDIR: {copies}")
    bench = [c for c in calls["python3"] if "gpu_bench.py" in c]
    good = os.path.join(tmp, copies[0] if copies else "?", "build-ab-good", "libflashattn.so")
    want = [f"bench/gpu_bench.py --lib {base}/libflashattn.so --lib-variant good={good} --quick "
            f"--op bwd --json {out}/ab.json --commit unknown",
            f"bench/gpu_bench.py --lib {base}/libflashattn.so --lib-variant good={good} --quick "
            f"--dims 64 --json {out}/ab-2.json --commit unknown"]
    check(bench == want, f"patch mode: gpu_bench calls {bench}, not {want}")
    ktimes = [c for c in calls["python3"] if "profile_kernels.py" in c]
    check(len(ktimes) == 4 and all("--kernel-times" in c and "--cases 64:1024:0" in c
                                   for c in ktimes), f"patch mode: kernel times {ktimes}")
    check(sorted(re.findall(r"--dtype (\w+)", " ".join(ktimes))) == ["bf16", "bf16", "fp16", "fp16"],
          f"patch mode: kernel times' dtypes {ktimes}")

    rc, text, calls = run(tmp, ["cmake", out, "pdl0=-DFA_TUNING_SM80_BWD_PDL=0",
                                "two=-DFA_X=1 -DFA_Y=2"], {"FA_AB_BASE_LIB": "/x/base.so"})
    check(rc == 0, f"cmake mode: rc {rc}: {text}")
    builds = [c for c in calls["cmake"] if c.startswith("-S|")]
    check(len(builds) == 2, f"cmake mode: {len(builds)} configure steps (FA_AB_BASE_LIB given)")
    check(len(builds) == 2 and builds[0].endswith("|-DFA_TUNING_SM80_BWD_PDL=0")
          and builds[1].endswith("|-DFA_X=1|-DFA_Y=2"), f"cmake mode: arguments {builds}")
    bench = [c for c in calls["python3"] if "gpu_bench.py" in c]
    want = [f"bench/gpu_bench.py --lib /x/base.so "
            f"--lib-variant pdl0={ROOT}/build-ab-pdl0/libflashattn.so "
            f"--lib-variant two={ROOT}/build-ab-two/libflashattn.so --quick "
            f"--json {out}/ab.json --commit unknown"]
    check(bench == want, f"cmake mode: gpu_bench calls {bench}, not {want}")

    for args, what in ((["nope", out], "unknown mode"), (["cmake", out], "cmake without variants"),
                       (["cmake", out, "=-DX=1"], "a variant without a name")):
        rc, text, calls = run(tmp, args, {"FA_AB_BASE_LIB": "/x/base.so"})
        check(rc == 2 and not any("gpu_bench" in c for c in calls["python3"]),
              f"{what}: rc {rc}, {calls['python3']}")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("ab.sh: ok")
