#!/usr/bin/env bash
# The Python-on-GPU crash (issue 6), on the GPU machine after scripts/gpu-check.sh has built
# build-gpu: the two test files that crash (dev/probe_throw.py's steps, which do not, ran on 2026-11-30), under
# dev/segv_trace.c, with the library frames of the trace resolved by addr2line.
#   dev/probe_throw.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: dev/probe_throw.sh OUTDIR}
lib=$PWD/build-gpu/libflashattn.so
mkdir -p "$out"
gcc -shared -fPIC -O1 -o "$out/segv_trace.so" dev/segv_trace.c -ldl || exit 1
FA_LIBRARY=$lib LD_PRELOAD=$out/segv_trace.so FA_SEGV_TRACE=$out/segv_trace.so PYTHONPATH=dev \
  timeout 400 python3 -m pytest -q -p no:faulthandler -p segv_plugin -p no:cacheprovider python/tests/test_compile.py python/tests/test_errors.py > "$out/trace.log" 2>&1
echo "pytest rc=$?"
grep -m2 -A30 "segv_trace:" "$out/trace.log" | cut -c1-220
grep -oE "libflashattn\.so[^ ]* \+0x[0-9a-f]+" "$out/trace.log" | awk '{print $2}' | sort -u |
  while read -r off; do echo "$off $(addr2line -f -C -e "$lib" "$off" | tr '\n' ' ')"; done
