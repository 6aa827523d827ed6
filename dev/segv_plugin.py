"""pytest plugin for dev/probe_throw.sh: re-installs dev/segv_trace.c's SIGSEGV handler before
every test, so that a handler installed later by an imported module cannot hide the trace.
  FA_SEGV_TRACE=/path/segv_trace.so PYTHONPATH=dev python3 -m pytest -p segv_plugin ..."""
import ctypes
import os

_trace = ctypes.CDLL(os.environ["FA_SEGV_TRACE"])


def pytest_runtest_setup(item):
    _trace.segv_trace_install()
