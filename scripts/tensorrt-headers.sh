#!/usr/bin/env bash
# Puts TensorRT's public headers (the include/ directory of NVIDIA/TensorRT, Apache-2.0) into
# .deps/tensorrt/include, where CMake finds them to build the TensorRT plugin (docs/tensorrt.md).
# .deps is git-ignored: the headers are never committed.
#
#   scripts/tensorrt-headers.sh DIR          copy DIR's headers: a TensorRT install or checkout
#                                            (DIR/include/NvInferRuntime.h) or a header directory
#                                            (DIR/NvInferRuntime.h)
#   scripts/tensorrt-headers.sh GITDIR [REF] export include/ at REF (default v10.16) from a git
#                                            repository of NVIDIA/TensorRT (a clone or a mirror)
#   scripts/tensorrt-headers.sh --clone [REF] shallow-clone github.com/NVIDIA/TensorRT at REF first
#                                            (FA_TENSORRT_GIT_URL: another URL of that repository)
#
# A machine with TensorRT installed needs none of this: pass -DFA_TENSORRT_INCLUDE_DIR=<its
# include directory> (e.g. /usr/include/x86_64-linux-gnu, or TensorRT-10.x/include of the tarball).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/.deps/tensorrt"
src=${1:?usage: scripts/tensorrt-headers.sh DIR | GITDIR [REF] | --clone [REF]}
ref=${2:-v10.16}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ "$src" = "--clone" ]; then
  # Only include/ is checked out (a sparse, blob-less shallow clone); its files are copied.
  url=${FA_TENSORRT_GIT_URL:-https://github.com/NVIDIA/TensorRT}
  git clone -q --depth 1 --branch "$ref" --filter=blob:none --sparse "$url" "$tmp/repo"
  git -C "$tmp/repo" sparse-checkout set include
  from="$tmp/repo/include"; what="include/ of $url at $ref ($(git -C "$tmp/repo" rev-parse HEAD))"
elif [ -f "$src/include/NvInferRuntime.h" ] && [ ! -d "$src/.git" ] && [ -z "${2:-}" ]; then
  from="$src/include"; what="copied from $from"
elif [ -f "$src/NvInferRuntime.h" ]; then
  from="$src"; what="copied from $from"
elif git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
  commit=$(git -C "$src" rev-parse --verify -q "$ref^{commit}") ||
    { echo "tensorrt-headers: $src has no commit '$ref'" >&2; exit 1; }
  git -C "$src" archive "$commit" include | tar -x -C "$tmp"
  from="$tmp/include"; what="include/ of NVIDIA/TensorRT at $ref ($commit)"
else
  echo "tensorrt-headers: $src holds no NvInferRuntime.h, include/NvInferRuntime.h or git repository" >&2
  exit 1
fi
[ -f "$from/NvInferRuntime.h" ] || { echo "tensorrt-headers: no NvInferRuntime.h in $from" >&2; exit 1; }

cp -R "$from" "$tmp/staged"  # before the old copy goes: $from may be it
rm -rf "$dest/include"
mkdir -p "$dest"
mv "$tmp/staged" "$dest/include"
echo "$what" > "$dest/SOURCE"
version=$(grep -hE '#define (NV_TENSORRT|TRT)_(MAJOR|MINOR|PATCH)(_ENTERPRISE)? +[0-9]+' \
  "$dest/include/NvInferVersion.h" | awk '{print $3}' | paste -sd. -)
echo "tensorrt-headers: TensorRT $version headers in $dest/include ($what)"
echo "tensorrt-headers: CMake finds them there (or pass -DFA_TENSORRT_INCLUDE_DIR=$dest/include)"
