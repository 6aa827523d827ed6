#!/usr/bin/env bash
# The Python-on-GPU crash (issue 6), on the GPU machine after scripts/gpu-check.sh has built
# build-gpu. Standalone probes (the library throwing after torch, CUDA, inductor and our
# own CUDA forward) did not crash there on 2026-11-30; pytest over test_compile.py + test_errors.py
# does, at the first rejected call. This runs those two files under dev/segv_trace.c, as they are
# ("lazy") and, with FA_PROBE_MODES="lazy now", also with LD_BIND_NOW=1 (every symbol bound at
# load time; on 2026-11-30 that crashed the same way, so late symbol interposition is not it).
#   dev/probe_throw.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: dev/probe_throw.sh OUTDIR}
lib=$PWD/build-gpu/libflashattn.so
mkdir -p "$out"
gcc -shared -fPIC -O1 -o "$out/segv_trace.so" dev/segv_trace.c -ldl || exit 1
for mode in ${FA_PROBE_MODES:-lazy}; do
  bind=()
  [ $mode = now ] && bind=(LD_BIND_NOW=1)
  env "${bind[@]}" FA_LIBRARY="$lib" LD_PRELOAD="$out/segv_trace.so" FA_SEGV_TRACE="$out/segv_trace.so" \
    PYTHONPATH=dev timeout 200 python3 -m pytest -q -s -p no:faulthandler -p segv_plugin \
    -p no:cacheprovider python/tests/test_compile.py python/tests/test_errors.py > "$out/trace-$mode.log" 2>&1
  echo "== binding $mode: pytest rc=$? $(tail -1 "$out/trace-$mode.log" | cut -c1-150)"
  grep -m2 -A30 "segv_trace:" "$out/trace-$mode.log" | cut -c1-220
  grep -oE "libflashattn\.so[^ ]* \+0x[0-9a-f]+" "$out/trace-$mode.log" | awk '{print $2}' | sort -u |
    while read -r off; do echo "$off $(addr2line -f -C -e "$lib" "$off" | tr '\n' ' ')"; done
done
