#!/usr/bin/env python3
"""A CPU user needs no CUDA library (issue 27): libflashattn.so links none, and opens its CUDA
backend (libflashattn_cuda.so, beside it) only when a call asks for CUDA.

Checks, on any machine (no GPU needed):
  1. readelf -d: libflashattn.so NEEDs no libcudart / libcublas / libcuda;
  2. a copy of libflashattn.so alone in an empty directory (the CUDA backend hidden from it):
     a CPU forward works and maps no CUDA library into the process; a CUDA request returns
     FA_ERROR_BACKEND naming libflashattn_cuda.so and the loader's reason (a CUDA build), or
     FA_ERROR_DEVICE (a CPU-only build, which has no backend to miss); fa_cuda_device_count() 0;
     the Python binding imports that copy and runs a CPU call (when torch is importable);
  3. stand-in backends beside a copy (tests/packaging/fake_backend.c): one whose handshake
     refuses, one that needs a missing library (as a backend without the CUDA runtime): each
     CUDA request returns FA_ERROR_BACKEND saying which (a CPU-only build never opens them);
  4. a CUDA build's library in place: the CPU forward maps no CUDA library either, and the CUDA
     request opens the backend (the CUDA runtime is mapped afterwards; with no GPU the request
     is FA_ERROR_DEVICE, no device).

  cpu_only_test.py LIBRARY PROBE WITH_CUDA(0|1) SANITIZED(0|1) FAKE_REFUSES FAKE_NEEDS_MISSING
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

LIB, PROBE, WITH_CUDA, SANITIZED = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4] == "1"
FAKE_REFUSES, FAKE_NEEDS_MISSING = sys.argv[5], sys.argv[6]
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PYDIR = os.path.join(ROOT, "python")
FA_ERROR_DEVICE, FA_ERROR_BACKEND = 15, 20
CUDA_NAMES = re.compile(r"lib(cudart|cublas|cublasLt|cuda|nvrtc|nvJitLink)\b")
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


def probe(lib):
    r = subprocess.run([PROBE, lib], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        fail(f"probe on {lib}: exit {r.returncode}\n{r.stdout}{r.stderr}")
        return None
    out = {}
    for line in r.stdout.splitlines():
        key, _, rest = line.partition(" ")
        out[key] = rest
    status, _, message = out["cuda_request"].partition(" ")
    return int(status), message, int(out["device_count"]), out["cuda_mapped_after"] == "1"


# 1. what the dynamic section asks for
readelf = shutil.which("readelf")
if readelf:
    dyn = subprocess.run([readelf, "-d", LIB], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\).*\[(.+?)\]", dyn)
    cuda = [n for n in needed if CUDA_NAMES.match(n)]
    if cuda:
        fail(f"{LIB} NEEDs {cuda}")
    print(f"NEEDED of {os.path.basename(LIB)}: {', '.join(needed)}")
else:
    print("readelf not found: NEEDED check skipped")

with tempfile.TemporaryDirectory() as tmp:
    # 2. the library without its backend
    alone = os.path.join(tmp, "libflashattn.so")
    shutil.copy(os.path.realpath(LIB), alone)
    res = probe(alone)
    if res:
        status, message, count, mapped = res
        if WITH_CUDA:
            if status != FA_ERROR_BACKEND or "libflashattn_cuda.so" not in message or \
                    "could not be loaded" not in message:
                fail(f"CUDA request without the backend: status {status} '{message}', expected "
                     "FA_ERROR_BACKEND naming libflashattn_cuda.so and the loader's reason")
        elif status != FA_ERROR_DEVICE:
            fail(f"CUDA request in a CPU-only build: status {status} '{message}'")
        if count != 0:
            fail(f"fa_cuda_device_count() = {count} without the backend")
        if mapped:
            fail("a CUDA library got mapped although the backend is missing")
        print(f"without the backend: CPU forward ok, no CUDA library mapped; CUDA request -> "
              f"{status}: {message}")

    # ... and the Python binding on that copy
    env = dict(os.environ, FA_LIBRARY=alone, PYTHONPATH=PYDIR)
    # the interpreter the binding's tests use: the first python3 with torch (and pytest)
    found = subprocess.run([os.path.join(ROOT, "scripts", "find-python.sh")],
                           capture_output=True, text=True)
    python = found.stdout.strip() if found.returncode == 0 else ""
    if SANITIZED:
        print("python: skipped in a sanitizer build (uninstrumented interpreter)")
    elif python:
        code = (
            "import torch, flashattn\n"
            "from flashattn import _library\n"
            f"assert _library.library_path() == {alone!r}, _library.library_path()\n"
            "q, k, v = (torch.randn(1, 9, 2, 16) for _ in range(3))\n"
            "out = flashattn.flash_attn_func(q, k, v, causal=True)\n"
            "s = torch.einsum('bqhd,bkhd->bhqk', q.double(), k.double()) / 4.0\n"
            "s = s.masked_fill(torch.ones(9, 9, dtype=torch.bool).triu(1), float('-inf'))\n"
            "ref = torch.einsum('bhqk,bkhd->bqhd', s.softmax(-1), v.double())\n"
            "assert (out.double() - ref).abs().max() < 1e-5\n"
            "assert _library.load().fa_cuda_device_count() == 0\n"
            "print('python: imports the copy, CPU call ok')\n")
        r = subprocess.run([python, "-c", code], capture_output=True, text=True, env=env,
                           cwd=tmp, timeout=300)
        print(r.stdout.strip())
        if r.returncode != 0:
            fail(f"python on the library without its backend:\n{r.stdout}{r.stderr[-3000:]}")
    else:
        print("python: no python3 with torch (scripts/find-python.sh), binding check skipped")

# 3. stand-in backends that fail in the loader's other two ways
for fake, expect in ((FAKE_REFUSES, ["does not fit this library", "fake backend: refuses"]),
                     (FAKE_NEEDS_MISSING, ["could not be loaded", "libfa_fake_dependency"])):
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(os.path.realpath(LIB), os.path.join(tmp, "libflashattn.so"))
        shutil.copy(fake, os.path.join(tmp, "libflashattn_cuda.so"))
        res = probe(os.path.join(tmp, "libflashattn.so"))
        if res is None:
            continue
        status, message, count, _ = res
        if WITH_CUDA and (status != FA_ERROR_BACKEND or not all(e in message for e in expect)):
            fail(f"{os.path.basename(fake)} as the backend: status {status} '{message}', "
                 f"expected FA_ERROR_BACKEND with {expect}")
        elif not WITH_CUDA and status != FA_ERROR_DEVICE:
            fail(f"a CPU-only build opened {os.path.basename(fake)}: status {status} '{message}'")
        elif count != 0:
            fail(f"fa_cuda_device_count() = {count} with {os.path.basename(fake)}")
        else:
            print(f"{os.path.basename(fake)} as the backend -> {status}: {message}")

# 4. the library in place, its backend beside it
if WITH_CUDA:
    res = probe(LIB)
    if res:
        status, message, count, mapped = res
        if status == FA_ERROR_BACKEND:
            fail(f"the backend beside {LIB} did not load: {message}")
        if not mapped:
            fail("a CUDA request did not open the CUDA backend (no CUDA runtime mapped after it)")
        print(f"with the backend: CPU forward maps no CUDA library; CUDA request opened it "
              f"({count} devices) -> {status}: {message}")

if failures:
    sys.exit(1)
print("ok: CPU use needs no CUDA library")
