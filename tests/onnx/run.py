"""ctest onnx_fuse: runs test_onnx_fuse.py with pytest, or exits 77 (skipped) with the reason when
onnxruntime / onnx / pytest are missing.  usage: run.py FA_ONNX_FUSE_BINARY FA_ORT_OP_LIBRARY"""
import os
import sys

missing = []
for mod in ("onnx", "onnxruntime", "pytest", "numpy"):
    try:
        __import__(mod)
    except ImportError:
        missing.append(mod)
if missing:
    print(f"skipped: {', '.join(missing)} not importable by {sys.executable} (scripts/setup.sh installs "
          "them into .deps/onnx-venv)")
    sys.exit(77)

import pytest  # noqa: E402

os.environ["FA_ONNX_FUSE"], os.environ["FA_ORT_OP"] = sys.argv[1], sys.argv[2]
here = os.path.dirname(os.path.abspath(__file__))
rc = pytest.main(["-q", "-rs", "-p", "no:cacheprovider", os.path.join(here, "test_onnx_fuse.py")])
sys.exit(1 if rc == 5 else int(rc))  # 5: no test ran, a failure here
