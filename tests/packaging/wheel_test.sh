#!/usr/bin/env bash
# The Python wheel (pyproject.toml at the repository root, scripts/build-wheel.sh): builds a
# CPU-only wheel with scikit-build-core and repairs it with auditwheel, installs it into a fresh
# venv, and checks what a user would: the wheel is a py3-none manylinux wheel carrying the library
# (and no CUDA backend), the OpenMP runtime it links (flashattn.libs/) and the license metadata;
# the library it loads is its own (flashattn/lib/, not a checkout's build), links no CUDA library
# and looks for its CUDA backend beside itself; an attention call on CPU tensors matches a plain
# torch computation. The wheel before the repair (what a plain `pip install .` installs) is
# py3-none-linux_<arch> and its library's run path is $ORIGIN alone; after the repair every entry
# is still relative to $ORIGIN. Skipped (77) without the packaging venv that scripts/setup.sh makes
# (.deps/pkg-venv with scikit-build-core and auditwheel).
#   tests/packaging/wheel_test.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
venv="$root/.deps/pkg-venv"
if ! "$venv/bin/python" -c 'import scikit_build_core, auditwheel' 2>/dev/null; then
  echo "skipped: no $venv with scikit-build-core and auditwheel (scripts/setup.sh makes it)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$root"
FA_CUDA=OFF scripts/build-wheel.sh "$tmp/dist" "$tmp/raw" > "$tmp/build-wheel.log" 2>&1 ||
  { tail -30 "$tmp/build-wheel.log"; exit 1; }
wheel=$(ls "$tmp"/dist/flashattn-*.whl)
raw=$(ls "$tmp"/raw/flashattn-*.whl)
# The run path (DT_RUNPATH, else DT_RPATH) of a wheel's flashattn/lib/libflashattn.so.
run_path() {
  rm -rf "$tmp/lib" && mkdir "$tmp/lib"
  unzip -q -d "$tmp/lib" "$1" flashattn/lib/libflashattn.so
  readelf -d "$tmp/lib/flashattn/lib/libflashattn.so" | sed -n 's/.*(R\(UN\)\{0,1\}PATH).*\[\(.*\)\]$/\2/p'
}
case $(basename "$raw") in
  *-py3-none-linux_x86_64.whl | *-py3-none-linux_aarch64.whl) ;;
  *) echo "FAIL: the plain pip wheel $(basename "$raw") is not py3-none-linux_<arch>"; exit 1 ;;
esac
rp=$(run_path "$raw")
[ "$rp" = '$ORIGIN' ] ||
  { echo "FAIL: the plain pip wheel's libflashattn.so has run path '$rp', not '\$ORIGIN'"; exit 1; }
rp=$(run_path "$wheel")
for entry in $(tr ':' ' ' <<< "$rp"); do
  case $entry in
    '$ORIGIN' | '$ORIGIN/'*) ;;
    *) echo "FAIL: the repaired wheel's libflashattn.so has run path '$rp' ('$entry' is not relative to \$ORIGIN)"; exit 1 ;;
  esac
done
[ -n "$rp" ] || { echo "FAIL: the repaired wheel's libflashattn.so has no run path"; exit 1; }
echo "run paths: plain pip wheel '\$ORIGIN', repaired '$rp'"
case $(basename "$wheel") in
  *-py3-none-manylinux_*_x86_64.whl | *-py3-none-manylinux_*_aarch64.whl) ;;
  *) echo "FAIL: wheel tag of $(basename "$wheel") is not py3-none-manylinux_<glibc>_<arch>"; exit 1 ;;
esac
meta=$(unzip -p "$wheel" 'flashattn-*.dist-info/METADATA')
grep -q '^License: BSD-3-Clause' <<< "$meta" || { echo "FAIL: no License in METADATA"; exit 1; }
grep -q '^Author: the flashattn authors' <<< "$meta" || { echo "FAIL: no Author in METADATA"; exit 1; }
# The listing is captured first: `unzip -l | grep -q` under pipefail fails whenever grep exits on
# its match before unzip has written everything (SIGPIPE), which made this check flaky.
files=$(unzip -Z1 "$wheel")
grep -q 'dist-info/licenses/LICENSE$' <<< "$files" || { echo "FAIL: LICENSE not in the wheel"; exit 1; }
# The libraries sit side by side in flashattn/lib/: the core, and a CUDA build's backend, which
# the core opens from its own directory (this CPU-only wheel has none).
grep -qx 'flashattn/lib/libflashattn.so' <<< "$files" || { echo "FAIL: no flashattn/lib/libflashattn.so"; exit 1; }
grep -q '^flashattn.libs/libgomp' <<< "$files" || { echo "FAIL: the OpenMP runtime is not in flashattn.libs/"; exit 1; }
if grep -q 'libflashattn_cuda' <<< "$files"; then echo "FAIL: a CPU-only wheel carries a CUDA backend"; exit 1; fi
/usr/bin/python3 -m venv --system-site-packages "$tmp/venv"
"$tmp/venv/bin/pip" install -q --no-deps --disable-pip-version-check "$wheel"
cd "$tmp"
env -u FA_LIBRARY "$tmp/venv/bin/python" - <<'PY'
import os, subprocess, sys
import torch
import flashattn
from flashattn import _library
here = os.path.dirname(flashattn.__file__)
lib = os.path.join(here, "lib", "libflashattn.so")
assert os.path.isfile(lib), "the wheel's library is missing"
found = [p for p in _library.candidate_paths() if os.path.exists(p)]
assert found and os.path.samefile(found[0], lib), f"loads {found[:1]}, not the wheel's {lib}"
ldd = subprocess.run(["ldd", lib], capture_output=True, text=True).stdout
assert "libcudart" not in ldd and "libcublas" not in ldd, "a CPU-only wheel links CUDA:\n" + ldd
assert "flashattn.libs/libgomp" in ldd, "libgomp is not the wheel's own copy:\n" + ldd
assert os.path.dirname(_library.cuda_backend_path()) == os.path.dirname(_library.library_path())
assert _library.load().fa_cuda_device_count() == 0
torch.manual_seed(0)
q, k, v = (torch.randn(2, 37, 4, 64) for _ in range(3))
out = flashattn.flash_attn_func(q, k, v, causal=True)
s = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.double()) / 8.0
s = s.masked_fill(torch.ones(37, 37, dtype=torch.bool).triu(1), float("-inf"))
ref = torch.einsum("bhqk,bkhd->bqhd", s.softmax(-1), v.double())
err = (out.double() - ref).abs().max().item()
assert err < 1e-5, f"max error {err}"
print(f"wheel ok: loads {lib}, links no CUDA library, max error {err:.2e}")
PY
