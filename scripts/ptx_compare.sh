#!/usr/bin/env bash
# Is a refactor of the CUDA kernels free of generated-code changes? Compiles every kernel source
# of two trees (the working tree and a git revision) to PTX for the given architectures, without
# -lineinfo (its line numbers would differ), and compares the PTX file by file: identical, the
# same instructions with other virtual register numbers (ptxas may then allocate differently:
# compare the SASS, scripts/sass_counts.py), or different instructions (their count given).
# Needs nvcc only, no GPU. Exit status 0 when no file has different instructions.
#   scripts/ptx_compare.sh [REV (default HEAD)] [ARCH... (default sm_80 sm_90a)]
# Work files go to ${FA_PTX_DIR:-/tmp/fa-ptx}; FA_PTX_FILTER (a glob, default '*') picks sources.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:-HEAD}
shift || true
archs=("$@")
[ ${#archs[@]} -eq 0 ] && archs=(sm_80 sm_90a)
work=${FA_PTX_DIR:-/tmp/fa-ptx}
rm -rf "$work" && mkdir -p "$work/old-tree" "$work/old" "$work/new"
git archive "$rev" | tar -x -C "$work/old-tree"
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
gen=$work/generated
mkdir -p "$gen"
printf '#pragma once\n#define FA_SM80_FWD_DIMS 32, 64, 96, 128, 160, 192, 224, 256\n#define FA_SM80_BWD_DIMS 32, 64, 96, 128, 160, 192, 224, 256\n' \
  > "$gen/fa_build_config.h"
compile() {  # tree outdir source arch
  local tree=$1 out=$2 src=$3 arch=$4
  local name
  name=$(basename "$src" .cu)-$arch.ptx
  "$nvcc" -O3 -DNDEBUG -std=c++17 --expt-relaxed-constexpr -DFA_WITH_CUDA=1 -arch="$arch" -ptx \
    -I"$tree/src" -I"$tree/include" -I"$gen" "$tree/$src" -o "$out/$name"
}
export -f compile
export nvcc gen
jobs=()
for src in $(cd "$work/old-tree" && ls src/cuda/instantiations/${FA_PTX_FILTER:-*}.cu src/cuda/kernels/*/*.cu 2>/dev/null); do
  [ -f "$src" ] || { echo "only in $rev: $src"; continue; }
  for arch in "${archs[@]}"; do jobs+=("$src $arch"); done
done
printf '%s\n' "${jobs[@]}" | xargs -P "$(nproc)" -L 1 bash -c \
  'compile "'"$work"'/old-tree" "'"$work"'/old" "$0" "$1" && compile "'"$PWD"'" "'"$work"'/new" "$0" "$1"'
same=0 renumbered=0 differ=0
mask() { sed -E 's/_GLOBAL__N__[0-9a-f]+_/_GLOBAL__N__/g' "$1"; }
# Virtual registers and labels numbered away, comments and blank lines dropped.
normal() { mask "$1" | sed -E 's/%(r|rd|rs|f|fd|p)[0-9]+/%\1/g; s/\$L__BB[0-9_]+/BB/g' | grep -vE '^\s*(//|$)'; }
count() { grep -cE '^\s+[a-z@]' "$1"; }
for f in "$work"/old/*.ptx; do
  n=$work/new/$(basename "$f")
  # Without -lineinfo no line names the source file; an anonymous namespace's mangled name
  # carries a hash of the file's path, which differs between the two trees and is masked.
  if cmp -s <(mask "$f") <(mask "$n"); then
    same=$((same + 1))
  elif cmp -s <(normal "$f") <(normal "$n"); then
    renumbered=$((renumbered + 1))
    echo "renumbered: $(basename "$f")"
  else
    differ=$((differ + 1))
    echo "differs: $(basename "$f") ($(count "$f") -> $(count "$n") instructions)"
  fi
done
echo "$same PTX files identical, $renumbered the same up to register numbers, $differ differ" \
  "(old: $rev, new: working tree; $work)"
[ "$differ" -eq 0 ]
