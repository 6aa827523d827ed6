#!/usr/bin/env bash
# Prints the first Python interpreter that can import both torch and pytest (what the Python
# binding's tests need) and exits 0, or prints nothing and exits 1. Candidates, in order: $FA_PYTHON,
# python3 on PATH (may be a pyenv or venv with a newer torch), Debian's /usr/bin/python3.
for py in ${FA_PYTHON:-} python3 /usr/bin/python3; do
  exe=$(command -v "$py" 2>/dev/null) || continue
  if "$exe" -c 'import torch, pytest' >/dev/null 2>&1; then
    echo "$exe"
    exit 0
  fi
done
exit 1
