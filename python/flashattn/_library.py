"""Finding and loading libflashattn, and turning its status codes into exceptions.

The binding talks to the library only through its C ABI (include/flashattn/flashattn.h) with
ctypes, so nothing here is compiled against torch: one build of the library works with every torch
version. The search order is documented in docs/python.md:

  1. $FA_LIBRARY (a path to the .so);
  2. when this package runs from a source checkout (python/flashattn inside the repository), the
     CMake build directories of that checkout: build/, build-gpu/, build-cpu/;
  3. a copy installed next to this file (flashattn/lib/), which `pip install ./python` puts there
     when it finds a built library at install time.

The library opens its CUDA backend (libflashattn_cuda.so, CUDA builds only) by itself, from the
directory it was loaded from, the first time a call needs CUDA; a CPU-only process never loads a
CUDA library. cuda_backend_path() says where that is. A copy of libflashattn.so moved elsewhere
(FA_LIBRARY) runs CPU calls alone and needs the backend beside it for CUDA tensors.
"""
import ctypes
import os
import threading

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))
# build/ first: the default preset, which has the CUDA backend where nvcc exists.
_BUILD_DIRS = ("build", "build-gpu", "build-cpu")
_NAMES = ("libflashattn.so", "libflashattn.dylib", "flashattn.dll")

# Mirrors fa_status in flashattn.h (names only; the library's message says what went wrong).
STATUS_NAMES = {
    0: "FA_OK", 1: "FA_ERROR_NULL_POINTER", 2: "FA_ERROR_DTYPE", 3: "FA_ERROR_RANK",
    4: "FA_ERROR_SHAPE", 5: "FA_ERROR_HEAD_DIM", 6: "FA_ERROR_HEADS", 7: "FA_ERROR_STRIDE",
    8: "FA_ERROR_ALIGNMENT", 9: "FA_ERROR_SIZE", 10: "FA_ERROR_CU_SEQLENS", 11: "FA_ERROR_WINDOW",
    12: "FA_ERROR_DROPOUT", 13: "FA_ERROR_SOFTCAP", 14: "FA_ERROR_SCALE", 15: "FA_ERROR_DEVICE",
    16: "FA_ERROR_WORKSPACE", 17: "FA_ERROR_ALIBI", 18: "FA_ERROR_UNSUPPORTED",
    19: "FA_ERROR_VERSION", 20: "FA_ERROR_BACKEND", 21: "FA_ERROR_CUDA", 22: "FA_ERROR_INTERNAL",
    23: "FA_ERROR_COMM",
}


class FlashAttnError(RuntimeError):
    """A call the library (or the binding, before calling it) rejected.

    `status` is the library's fa_status code (an int, see STATUS_NAMES) and the message is the
    library's fa_last_error() text, which names the argument, its value and the expectation."""

    def __init__(self, status, message):
        self.status = status
        self.status_name = STATUS_NAMES.get(status, str(status))
        super().__init__(f"{message} [{self.status_name}]")


def candidate_paths():
    """Where load() looks, in order (existing or not)."""
    paths = []
    env = os.environ.get("FA_LIBRARY")
    if env:
        paths.append(env)
    # A source checkout: python/flashattn/ sits two levels under the repository root.
    if os.path.isfile(os.path.join(_REPO, "include", "flashattn", "flashattn.h")):
        for d in _BUILD_DIRS:
            paths.extend(os.path.join(_REPO, d, n) for n in _NAMES)
    paths.extend(os.path.join(_HERE, "lib", n) for n in _NAMES)
    return paths


_lock = threading.Lock()
_lib = None
_path = None


def load():
    """The loaded library (a ctypes.CDLL with argument types declared). Loads it once."""
    global _lib, _path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        env = os.environ.get("FA_LIBRARY")
        if env and not os.path.isfile(env):
            raise OSError(f"FA_LIBRARY={env} does not exist")
        tried = candidate_paths()
        found = next((p for p in tried if os.path.isfile(p)), None)
        if found is None:
            raise OSError("libflashattn not found; build it with CMake (see README.md) or set "
                          "FA_LIBRARY to its path. Looked in:\n  " + "\n  ".join(tried))
        lib = ctypes.CDLL(found)
        _declare(lib)
        from . import _params  # late: _params needs nothing from here but the loaded lib
        _params.check_layout(lib)
        _path, _lib = found, lib
        return lib


def _declare(lib):
    c = ctypes
    lib.fa_version.restype = c.c_int32
    lib.fa_build_info.restype = c.c_char_p
    lib.fa_last_error.restype = c.c_char_p
    # The initialisers of the 0.2 layout (FaParams), the 0.3 one (FaParamsV3), the 0.4 one
    # (FaParamsV4) and the 0.5 one (FaParamsV5, the C header's fa_params_init); the symbol
    # fa_params_init itself writes the 0.1 layout, for programs built against that header.
    for name in ("fa_params_init_v2", "fa_params_init_v3", "fa_params_init_v4",
                 "fa_params_init_v5"):
        fn = getattr(lib, name)
        fn.argtypes = [c.c_void_p]
        fn.restype = None
    for name in ("fa_forward_workspace_size", "fa_backward_workspace_size"):
        fn = getattr(lib, name)
        fn.argtypes = [c.c_void_p, c.POINTER(c.c_size_t)]
        fn.restype = c.c_int
    for name in ("fa_forward", "fa_backward"):
        fn = getattr(lib, name)
        fn.argtypes = [c.c_void_p, c.c_void_p, c.c_size_t, c.c_void_p]
        fn.restype = c.c_int
    lib.fa_cuda_device_count.restype = c.c_int32
    lib.fa_select_kernel.argtypes = [c.c_void_p, c.c_int32, c.POINTER(c.c_char_p)]
    lib.fa_select_kernel.restype = c.c_int


def check(lib, status, what):
    """Raises FlashAttnError with the library's message when status is not FA_OK."""
    if status != 0:
        msg = lib.fa_last_error().decode("utf-8", "replace")
        raise FlashAttnError(status, f"{what}: {msg}")


def library_path():
    """Path of the loaded libflashattn (loads it if needed)."""
    load()
    return _path


def cuda_backend_path():
    """Where the loaded libflashattn opens its CUDA backend from (existing or not): the file
    libflashattn_cuda.so in the library's own directory."""
    return os.path.join(os.path.dirname(library_path()), "libflashattn_cuda.so")


def build_info():
    """The library's build description, e.g. 'flashattn 0.1.0 cpu(avx2) cuda(80,90a)'."""
    return load().fa_build_info().decode()
