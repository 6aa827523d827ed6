#!/usr/bin/env python3
"""The consumer examples of docs/api.md ("Building against it") build and run against an
installed tree: `cmake --install` of this build into a temporary prefix (no rebuild: the build
tree's library is what gets installed), then consumer.c through pkg-config, and consumer.c and
consumer.cpp through find_package(flashattn). The installed tree is moved before use, so nothing
leans on the build tree or on the prefix's original path (the .pc file is relocatable).

  consumer_test.py CMAKE BUILD_DIR C_COMPILER CXX_COMPILER WITH_CUDA(0|1) PROJECT_VERSION
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

CMAKE, BUILD, CC, CXX, WITH_CUDA, VERSION = sys.argv[1:7]
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
EXPECT = {"c": "out[0] = (1, 2)", "cpp": "out[0] = 0.5"}


def example(marker):
    """The fenced block of docs/api.md whose first line is `marker`."""
    with open(os.path.join(ROOT, "docs", "api.md"), encoding="utf-8") as f:
        doc = f.read()
    for block in re.findall(r"```(?:c|cpp)\n(.*?)```", doc, re.S):
        if block.startswith(marker):
            return block
    sys.exit(f"FAIL: no block starting with {marker!r} in docs/api.md")


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, **kw)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)}: exit {r.returncode}\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    return r.stdout


def check_output(exe, kind, env):
    out = run([exe], env=env)
    if EXPECT[kind] not in out:
        sys.exit(f"FAIL: {exe} printed {out!r}, expected {EXPECT[kind]!r}")
    print(f"  {os.path.basename(exe)}: {out.strip()}")


with tempfile.TemporaryDirectory() as tmp:
    staged = os.path.join(tmp, "staged")
    run([CMAKE, "--install", BUILD, "--prefix", staged])
    prefix = os.path.join(tmp, "prefix")
    shutil.move(staged, prefix)  # relocated: only relative paths may work now
    libdir = next(os.path.join(prefix, d) for d in ("lib", "lib64", "lib/x86_64-linux-gnu")
                  if os.path.isfile(os.path.join(prefix, d, "pkgconfig", "flashattn.pc")))
    if WITH_CUDA == "1" and not os.path.isfile(os.path.join(libdir, "libflashattn_cuda.so")):
        sys.exit(f"FAIL: the CUDA backend is not installed beside the library in {libdir}")
    src = os.path.join(tmp, "src")
    os.makedirs(src)
    for name, marker in (("consumer.c", "/* consumer.c */"), ("consumer.cpp", "// consumer.cpp")):
        with open(os.path.join(src, name), "w", encoding="utf-8") as f:
            f.write(example(marker))
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "PKG_CONFIG_PATH")}
    run_env = dict(env, LD_LIBRARY_PATH=libdir)

    # pkg-config, on the installed flashattn.pc alone (PKG_CONFIG_PATH names only the moved
    # prefix): the flags point into that prefix, name the library and no CUDA library (a CPU
    # user's link line), and the version is the project's.
    pkg = shutil.which("pkg-config") or shutil.which("pkgconf")
    if not pkg:
        sys.exit("FAIL: pkg-config not found (scripts/setup.sh installs Debian's pkgconf)")
    pc_env = dict(env, PKG_CONFIG_PATH=os.path.join(libdir, "pkgconfig"), PKG_CONFIG_LIBDIR="")
    flags = run([pkg, "--cflags", "--libs", "flashattn"], env=pc_env).split()
    version = run([pkg, "--modversion", "flashattn"], env=pc_env).strip()
    in_prefix = lambda f: os.path.realpath(f[2:]).startswith(os.path.realpath(prefix))
    if not any(f.startswith("-I") and in_prefix(f) for f in flags):
        sys.exit(f"FAIL: pkg-config --cflags {flags} do not point into the moved prefix")
    if not any(f.startswith("-L") and in_prefix(f) for f in flags) or "-lflashattn" not in flags:
        sys.exit(f"FAIL: pkg-config --libs {flags} do not name -lflashattn in the moved prefix")
    if any("cuda" in f or "cublas" in f for f in flags):
        sys.exit(f"FAIL: pkg-config flags {flags} name a CUDA library")
    if version != VERSION:
        sys.exit(f"FAIL: pkg-config --modversion flashattn is {version!r}, the project is {VERSION!r}")
    exe = os.path.join(tmp, "consumer_pc")
    run([CC, "-std=c99", os.path.join(src, "consumer.c"), *flags, "-o", exe], env=env)
    print(f"pkg-config flashattn {version}: {' '.join(flags)}")
    check_output(exe, "c", run_env)

    # find_package
    with open(os.path.join(src, "CMakeLists.txt"), "w", encoding="utf-8") as f:
        f.write("cmake_minimum_required(VERSION 3.16)\n"
                "project(consumer C CXX)\n"
                "find_package(flashattn REQUIRED)\n"
                "add_executable(consumer_c consumer.c)\n"
                "target_link_libraries(consumer_c PRIVATE flashattn::flashattn)\n"
                "add_executable(consumer_cpp consumer.cpp)\n"
                "set_target_properties(consumer_cpp PROPERTIES CXX_STANDARD 17)\n"
                "target_link_libraries(consumer_cpp PRIVATE flashattn::flashattn)\n")
    bld = os.path.join(tmp, "consumer-build")
    run([CMAKE, "-S", src, "-B", bld, f"-DCMAKE_PREFIX_PATH={prefix}", f"-DCMAKE_C_COMPILER={CC}",
         f"-DCMAKE_CXX_COMPILER={CXX}", "-DCMAKE_BUILD_TYPE=Release"], env=env)
    run([CMAKE, "--build", bld, "-j2"], env=env)
    print("find_package(flashattn):")
    check_output(os.path.join(bld, "consumer_c"), "c", env)  # build RPATH names the prefix
    check_output(os.path.join(bld, "consumer_cpp"), "cpp", env)
print("ok: docs/api.md's consumers build and run against the installed tree")
