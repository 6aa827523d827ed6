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
     is FA_ERROR_DEVICE, no device);
  5. a CPU suite with the CUDA libraries hidden from the loader: programs run through the dynamic
     loader with --inhibit-cache (so the toolkit's ld.so.conf entry does not count) and a library
     path of the copy's directory and LD_LIBRARY_PATH less its CUDA directories. There, first,
     the CUDA runtime and cuBLAS cannot be opened by name, and `ldd` of the copy (ld.so --list)
     resolves everything and names no CUDA library; then the C ABI programs (c_abi_check, the old
     callers) and the Python binding's CPU tests (CPU_TESTS below, ~130 tests, seconds) pass on
     the copy. fa_tests is not run there: it links the internal static library, which in a CUDA
     build carries the backend and so the CUDA runtime itself; a CPU user never loads it.

  cpu_only_test.py LIBRARY PROBE WITH_CUDA(0|1) SANITIZED(0|1) FAKE_REFUSES FAKE_NEEDS_MISSING
                   C_PROGRAM...
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

LIB, PROBE, WITH_CUDA, SANITIZED = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4] == "1"
FAKE_REFUSES, FAKE_NEEDS_MISSING = sys.argv[5], sys.argv[6]
C_PROGRAMS = sys.argv[7:]  # C ABI tests linked to libflashattn.so, run in step 5
# The Python binding's CPU tests for step 5 (GPU cases in them skip without a device).
CPU_TESTS = ["test_cpu_attention.py", "test_errors.py", "test_cpu_varlen_packed.py",
             "test_kvcache.py", "test_cpu_dropout.py", "test_attn_bias.py"]
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



# 5. a CPU suite with the CUDA libraries hidden from the loader
def interpreter(program):
    """The dynamic loader a program asks for (its PT_INTERP), or None."""
    r = subprocess.run([readelf, "-l", program], capture_output=True, text=True)
    m = re.search(r"program interpreter: (\S+?)\]", r.stdout)
    return m.group(1) if m else None


def hidden_run(ldso, libdir, argv, **kw):
    """argv run by the loader without its cache and with libdir first on the library path."""
    keep = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d and "cuda" not in d.lower()]
    path = ":".join([libdir] + keep)
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    env.update(kw.pop("env", {}), LD_LIBRARY_PATH=path)  # for children, which use the cache again
    return subprocess.run([ldso, "--inhibit-cache", "--library-path", path, *argv],
                          capture_output=True, text=True, env=env, timeout=240, **kw)


def cuda_names():
    """Sonames the CUDA backend NEEDs (a CUDA build), else the usual ones."""
    backend = os.path.join(os.path.dirname(LIB), "libflashattn_cuda.so")
    if WITH_CUDA and os.path.isfile(backend):
        dyn = subprocess.run([readelf, "-d", backend], capture_output=True, text=True).stdout
        names = [n for n in re.findall(r"\(NEEDED\).*\[(.+?)\]", dyn) if CUDA_NAMES.match(n)]
        if names:
            return names
    return ["libcudart.so", "libcublas.so"]


if SANITIZED:
    print("hidden CUDA: skipped in a sanitizer build (the default build runs it)")
elif not readelf or not python:
    print("hidden CUDA: skipped (needs readelf and a python3 with torch and pytest)")
else:
    # The real interpreter (python may be a pyenv shim, a script the loader cannot run).
    real_python = subprocess.run([python, "-c", "import sys; print(sys.executable)"],
                                 capture_output=True, text=True).stdout.strip()
    ldso = interpreter(real_python)
    with tempfile.TemporaryDirectory() as tmp:
        alone = os.path.join(tmp, "libflashattn.so")
        shutil.copy(os.path.realpath(LIB), alone)
        names = cuda_names()
        code = ("import ctypes, sys\n"
                "for n in sys.argv[1:]:\n"
                "    try:\n"
                "        ctypes.CDLL(n); print('loadable', n)\n"
                "    except OSError:\n"
                "        print('hidden', n)\n")
        normal = subprocess.run([real_python, "-c", code, *names], capture_output=True, text=True).stdout
        r = hidden_run(ldso, tmp, [real_python, "-c", code, *names])
        loadable = [l.split()[1] for l in r.stdout.splitlines() if l.startswith("loadable")]
        if r.returncode != 0:
            fail(f"python with CUDA hidden: exit {r.returncode}\n{r.stderr[-2000:]}")
        elif loadable:
            # e.g. a CUDA runtime in one of the loader's own directories (Debian's
            # nvidia-cuda-toolkit): it cannot be hidden this way, but nothing below may need it.
            print(f"hidden CUDA: {', '.join(loadable)} still loadable (in a default directory of "
                  "the loader); the runs below cannot prove its absence")
        else:
            print(f"hidden CUDA: {', '.join(names)} cannot be opened (without hiding: "
                  f"{'; '.join(normal.splitlines())})")
        r = hidden_run(ldso, tmp, ["--list", alone])
        listed = r.stdout
        if r.returncode != 0 or "not found" in listed or CUDA_NAMES.search(listed):
            fail(f"ldd of the copy with CUDA hidden (exit {r.returncode}):\n{listed}{r.stderr}")
        else:
            print("hidden CUDA: ldd " + ", ".join(re.findall(r"^\s*(\S+) =>", listed, re.M)))
        for program in C_PROGRAMS:
            r = hidden_run(ldso, tmp, [program])
            if r.returncode != 0:
                fail(f"{os.path.basename(program)} with CUDA hidden: exit {r.returncode}\n"
                     f"{r.stdout[-2000:]}{r.stderr[-2000:]}")
            else:
                print(f"hidden CUDA: {os.path.basename(program)} ok")
        tests = [os.path.join(PYDIR, "tests", t) for t in CPU_TESTS]
        r = hidden_run(ldso, tmp, [real_python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
                       env={"FA_LIBRARY": alone, "PYTHONPATH": PYDIR}, cwd=tmp)
        summary = r.stdout.strip().splitlines()[-1:] or [""]
        if r.returncode != 0:
            fail(f"the Python CPU tests with CUDA hidden: exit {r.returncode}\n"
                 f"{r.stdout[-4000:]}{r.stderr[-2000:]}")
        else:
            print(f"hidden CUDA: python {' '.join(CPU_TESTS)}: {summary[0]}")

if failures:
    sys.exit(1)
print("ok: CPU use needs no CUDA library")
