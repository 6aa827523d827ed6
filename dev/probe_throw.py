"""Diagnostic for the Python-on-GPU crash (issue 6): the library throws and catches a C++
exception inside every call it rejects. Each step runs in its own process and makes the library
throw (fa_forward_workspace_size with bytes=NULL) after a different amount of torch set-up, and
prints which runtime libraries the process mapped. Run from the repository root: python3 dev/probe_throw.py LIB"""
import subprocess
import sys

STEP = r'''
import ctypes, sys
lib_path, step = sys.argv[1], sys.argv[2]
if step != "bare":
    import torch
if step in ("cuda", "cuda-inductor"):
    torch.zeros(1, device="cuda")
if step in ("inductor", "cuda-inductor"):
    f = torch.compile(lambda x: x.sin() + 1)
    f(torch.randn(8))
if step.startswith("flash-cuda"):  # our CUDA forward first, through the binding
    import os
    os.environ["FA_LIBRARY"] = lib_path
    sys.path.insert(0, "python")
    import flashattn
    q = torch.randn(2, 40, 4, 64, device="cuda", dtype=torch.float16)
    f = flashattn.flash_attn_func
    if step == "flash-cuda-compiled":
        f = torch.compile(f, fullgraph=True)
    f(q, q, q, causal=True)
    torch.cuda.synchronize()
lib = ctypes.CDLL(lib_path)
buf = ctypes.create_string_buffer(4096)
lib.fa_params_init(buf)
print("calling", flush=True)
st = lib.fa_forward_workspace_size(buf, None)
lib.fa_last_error.restype = ctypes.c_char_p
print("status", st, lib.fa_last_error().decode(), flush=True)
libs = set()
for line in open("/proc/self/maps"):
    parts = line.split()
    if len(parts) >= 6 and any(k in parts[5] for k in ("gcc_s", "stdc++", "gomp", "unwind", "cudart", "flashattn")):
        libs.add(parts[5])
print("\n".join(sorted(libs)))
'''

lib = sys.argv[1]
for step in ("bare", "torch", "inductor", "cuda", "cuda-inductor", "flash-cuda", "flash-cuda-compiled"):
    r = subprocess.run([sys.executable, "-X", "faulthandler", "-c", STEP, lib, step],
                       capture_output=True, text=True, timeout=300)
    print(f"== {step}: rc={r.returncode}")
    print(r.stdout.strip())
    if r.returncode:
        print(r.stderr.strip()[-1500:])
