"""ctypes mirror of the flashattn C ABI (include/flashattn/flashattn.h) for torch tensors.

Used by the GPU benchmark to call the library exactly as a C program would. The struct layout is
checked against the library's own sizeof(fa_params) at load time."""
import ctypes
import os
import sys

# The struct mirror is the Python package's (python/flashattn/_params.py), one definition for both.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from flashattn._params import FaParams, FaTensor  # noqa: E402

FA_DEVICE_CPU, FA_DEVICE_CUDA = 0, 1
FA_DTYPE = {"float32": 0, "float16": 1, "bfloat16": 2}


def load(path=None):
    path = path or os.environ.get("FA_LIBRARY", "build/libflashattn.so")
    lib = ctypes.CDLL(path)
    # fa_params_init_v2: the initialiser of the layout FaParams mirrors (0.2; the header's
    # fa_params_init). The symbol fa_params_init writes the 0.1 layout.
    lib.fa_params_init_v2.argtypes = [ctypes.POINTER(FaParams)]
    lib.fa_forward.argtypes = [ctypes.POINTER(FaParams), ctypes.c_void_p, ctypes.c_size_t,
                               ctypes.c_void_p]
    lib.fa_forward.restype = ctypes.c_int
    lib.fa_backward.argtypes = lib.fa_forward.argtypes
    lib.fa_backward.restype = ctypes.c_int
    for f in (lib.fa_forward_workspace_size, lib.fa_backward_workspace_size):
        f.argtypes = [ctypes.POINTER(FaParams), ctypes.POINTER(ctypes.c_size_t)]
        f.restype = ctypes.c_int
    lib.fa_select_kernel.argtypes = [ctypes.POINTER(FaParams), ctypes.c_int32,
                                     ctypes.POINTER(ctypes.c_char_p)]
    lib.fa_select_kernel.restype = ctypes.c_int
    lib.fa_last_error.restype = ctypes.c_char_p
    lib.fa_build_info.restype = ctypes.c_char_p
    p = FaParams()
    lib.fa_params_init_v2(ctypes.byref(p))
    if p.struct_size != ctypes.sizeof(FaParams):
        raise RuntimeError(f"fa_params layout mismatch: library {p.struct_size} bytes, "
                           f"ctypes {ctypes.sizeof(FaParams)}")
    return lib


def tensor(t):
    """fa_tensor view of a torch tensor (no copy)."""
    d = FaTensor()
    d.data = t.data_ptr()
    d.dtype = FA_DTYPE[str(t.dtype).replace("torch.", "")]
    d.rank = t.dim()
    for i in range(t.dim()):
        d.shape[i] = t.shape[i]
        d.stride[i] = t.stride(i)
    d.device.type = FA_DEVICE_CUDA if t.is_cuda else FA_DEVICE_CPU
    d.device.index = (t.device.index or 0) if t.is_cuda else 0
    return d


def forward_params(lib, q, k, v, out, lse, causal=False, softmax_scale=0.0, window=(-1, -1),
                   softcap=0.0, dropout_p=0.0, seed=0, offset=0):
    p = FaParams()
    lib.fa_params_init_v2(ctypes.byref(p))
    p.q, p.k, p.v, p.out, p.lse = tensor(q), tensor(k), tensor(v), tensor(out), tensor(lse)
    p.causal = int(causal)
    p.softmax_scale = softmax_scale
    p.window_left, p.window_right = window
    p.softcap = softcap
    p.dropout_p, p.seed, p.offset = dropout_p, seed, offset
    return p


def with_grads(p, dout, dq, dk, dv):
    """Adds the backward's tensors to forward params."""
    p.dout, p.dq, p.dk, p.dv = tensor(dout), tensor(dq), tensor(dk), tensor(dv)
    return p


def backward_params(lib, q, k, v, out, lse, dout, dq, dk, dv, causal=False, deterministic=False,
                    **options):
    """Params for fa_backward (and for the fa_forward that makes out and lse first): q, k, v,
    out, lse and dout in, dq, dk, dv out. options: forward_params' softmax_scale, window, softcap."""
    p = with_grads(forward_params(lib, q, k, v, out, lse, causal=causal, **options),
                   dout, dq, dk, dv)
    p.deterministic = int(deterministic)
    return p


class FaError(RuntimeError):
    def __init__(self, what, status, message):
        super().__init__(f"{what}: status {status}: {message}")
        self.status = status


FA_ERROR_BACKEND, FA_ERROR_UNSUPPORTED = 20, 18


def workspace_size(lib, p, backward=False):
    n = ctypes.c_size_t(0)
    f = lib.fa_backward_workspace_size if backward else lib.fa_forward_workspace_size
    st = f(ctypes.byref(p), ctypes.byref(n))
    if st != 0:
        raise FaError("workspace query", st, lib.fa_last_error().decode())
    return n.value


def select_kernel(lib, p, backward=False):
    """The kernel family fa_forward (backward: fa_backward) runs on p, e.g. "cuda-sm80"
    (fa_select_kernel; validates p as the call does)."""
    name = ctypes.c_char_p()
    st = lib.fa_select_kernel(ctypes.byref(p), int(backward), ctypes.byref(name))
    if st != 0:
        raise FaError("fa_select_kernel", st, lib.fa_last_error().decode())
    return name.value.decode()


def forward(lib, p, stream=0, workspace=None, workspace_bytes=0):
    st = lib.fa_forward(ctypes.byref(p), workspace, workspace_bytes, ctypes.c_void_p(stream))
    if st != 0:
        raise FaError("fa_forward", st, lib.fa_last_error().decode())


def backward(lib, p, stream=0, workspace=None, workspace_bytes=0):
    st = lib.fa_backward(ctypes.byref(p), workspace, workspace_bytes, ctypes.c_void_p(stream))
    if st != 0:
        raise FaError("fa_backward", st, lib.fa_last_error().decode())
