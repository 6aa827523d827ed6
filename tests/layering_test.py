#!/usr/bin/env python3
"""The layers of shared/DESIGN.md hold in the includes: dependencies point down only.

- src/core/ (the data model and the host/device-shared semantics) includes nothing of the
  project outside src/core/ and the public headers;
- the backends (src/cpu/, src/cuda/) include nothing of src/api/ (what they need of a call comes
  in Params, from src/core/);
- src/parallel/ (ring attention) includes nothing of src/api/ (it calls the C ABI);
- src/api/ includes no tool, test or binding;
- nothing under src/ reads the process environment (getenv): behaviour and workspace sizes are
  functions of the call (and the knobs of src/core/tuning.h), never of a variable.
Exit status 1 with every offending line."""
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
# layer -> the project include prefixes it may use
ALLOWED = {
    "src/core": ("core/", "flashattn/"),
    "src/cpu": ("core/", "cpu/", "flashattn/"),
    "src/cuda": ("core/", "cuda/", "flashattn/"),
    "src/api": ("core/", "api/", "cpu/", "cuda/", "parallel/", "flashattn/"),
    # ring attention: over the C ABI's entry points and the CPU combine step
    "src/parallel": ("core/", "cpu/", "parallel/", "flashattn/"),
}

GENERATED = ("fa_build_config.h",)  # written by CMake into the build tree (the build's lists)

bad = []
for layer, allowed in ALLOWED.items():
    for dirpath, _, files in os.walk(os.path.join(ROOT, layer)):
        for name in files:
            if not name.endswith((".h", ".hpp", ".cpp", ".cu", ".cuh", ".c")):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, ROOT)
            with open(path, encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    if re.search(r"\b(secure_)?getenv\s*\(", line):
                        bad.append(f"{rel}:{n}: reads the environment ({line.strip()[:60]})")
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    inc = m.group(1)
                    # a file's own directory (e.g. "fuzz_case.h") is not a layer include
                    if "/" not in inc and os.path.exists(os.path.join(dirpath, inc)):
                        continue
                    if inc in GENERATED and layer != "src/core":
                        continue
                    if not inc.startswith(allowed):
                        bad.append(f"{rel}:{n}: includes \"{inc}\" ({layer} may include "
                                   f"{', '.join(allowed)})")
if bad:
    print("\n".join(bad))
    sys.exit(1)
print("layering: ok")
