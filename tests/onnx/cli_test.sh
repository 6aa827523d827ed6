#!/bin/sh
# fa-onnx-fuse's command line without ONNX Runtime (ctest onnx_fuse_cli): a usage error names the
# argument, points to --help and exits 2; a file that is no ONNX model exits 1; --help is the man
# page and exits 0.
#   tests/onnx/cli_test.sh FA_ONNX_FUSE NOT_A_MODEL
tool=$1 not_a_model=$2
fail=0
# expect STATUS TEXT ARGS...: the tool run with ARGS exits STATUS and prints TEXT (stdout or stderr).
expect() {
  want=$1 text=$2
  shift 2
  out=$("$tool" "$@" 2>&1)
  got=$?
  if [ "$got" -ne "$want" ] || ! printf '%s\n' "$out" | grep -qF -- "$text"; then
    echo "FAIL: fa-onnx-fuse $*: exit $got (expected $want), output without '$text':"
    printf '%s\n' "$out"
    fail=1
  else
    echo "ok: fa-onnx-fuse $*: exit $got, '$text'"
  fi
}
expect 2 "INPUT is required"
expect 2 "fa-onnx-fuse --help"
expect 2 "--report: directory '/nonexistent/' is not writable" "$not_a_model" --report /nonexistent/r.json
expect 2 "not expected: extra.onnx" "$not_a_model" extra.onnx
expect 1 "is not an ONNX model" "$not_a_model"
expect 0 "SYNOPSIS" --help
exit $fail
