#!/usr/bin/env python3
"""`cmake --install` of a build puts fa-bench in PREFIX/bin, and the installed binary runs from
there, finding the installed library through its relative RPATH (not the build tree's). It
NEEDs no CUDA library, in a CUDA build too: it opens the CUDA runtime at first use
(tools/fa-bench/cuda_runtime_loader.h), so it starts where none is installed.

  install_test.py CMAKE BUILD_DIR
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

CMAKE, BUILD = sys.argv[1], sys.argv[2]

with tempfile.TemporaryDirectory() as tmp:
    prefix = os.path.join(tmp, "prefix")
    r = subprocess.run([CMAKE, "--install", BUILD, "--prefix", prefix], capture_output=True,
                       text=True, timeout=100)
    if r.returncode != 0:
        print("cmake --install failed:", r.stdout[-2000:], r.stderr[-2000:])
        sys.exit(1)
    exe = os.path.join(prefix, "bin", "fa-bench")
    if not os.access(exe, os.X_OK):
        print(f"{exe} not installed; installed: {r.stdout[-2000:]}")
        sys.exit(1)
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    if shutil.which("readelf"):
        dyn = subprocess.run(["readelf", "-d", exe], capture_output=True, text=True).stdout
        needed = re.findall(r"\(NEEDED\).*\[(.+?)\]", dyn)
        cuda = [n for n in needed if re.match(r"lib(cudart|cublas|cublasLt|cuda)\b", n)]
        if not needed or cuda:
            print(f"installed fa-bench NEEDs {needed}: a CUDA library among them, or none read")
            sys.exit(1)
    # The build tree moved away: the binary must not lean on its build RPATH.
    if shutil.which("ldd"):
        ldd = subprocess.run(["ldd", exe], capture_output=True, text=True, env=env).stdout
        lib = [line for line in ldd.splitlines() if "libflashattn" in line]
        if not lib or os.path.realpath(prefix) not in os.path.realpath(lib[0].split("=>")[-1].split()[0]):
            print(f"installed fa-bench does not load the installed library:\n{ldd}")
            sys.exit(1)
    for args, expect in [(["--help"], "SYNOPSIS"),
                         (["plan", "--model", "llama-2-7b", "-s", "4096"], "llama-2-7b")]:
        r = subprocess.run([exe, *args], capture_output=True, text=True, env=env, timeout=60)
        if r.returncode != 0 or expect not in r.stdout:
            print(f"installed fa-bench {args}: exit {r.returncode}\n{r.stdout}\n{r.stderr}")
            sys.exit(1)
print("ok: fa-bench installed and runs from the prefix")
