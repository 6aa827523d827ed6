"""What the GPU benchmark scripts share (shared/BENCH.md's method and record): CUDA-event timing,
the card's ceilings, and the header fields of a record."""
import statistics
import subprocess
import sys
import time

import torch


def time_fn(fns, repeats, warmup=5, warmup_ms=200.0):
    """Median ms of fns[i % len(fns)]() over `repeats` runs, CUDA events around each, after
    untimed runs (rotating through fns, i.e. through the input sets): at least `warmup` of them
    and at least `warmup_ms` of them, each waited for. The time-based warm-up is there because a
    backend timed right after cuDNN's backward read up to 14% slow with five warm-up calls
    (thirteenth session, docs/performance-log.md; presumably the clock recovering from cuDNN's
    higher power draw)."""
    i, t0 = 0, time.perf_counter()
    while i < warmup or (time.perf_counter() - t0) * 1e3 < warmup_ms:
        fns[i % len(fns)]()
        torch.cuda.synchronize()
        i += 1
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
          for _ in range(repeats)]
    for i, (a, b) in enumerate(ev):
        a.record()
        fns[i % len(fns)]()
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in ev)


def median_ms(fns, repeats, device="cuda"):
    """time_fn on CUDA; on the CPU (the benchmarks' smoke runs) the median wall time of `repeats`
    calls rotating through fns, with no warm-up."""
    if device == "cuda":
        return time_fn(fns, repeats)
    times = []
    for i in range(repeats):
        t0 = time.perf_counter()
        fns[i % len(fns)]()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def ceilings():
    """The card's ceilings, measured once per run: a bf16 8192^3 GEMM (TFLOP/s) and a 2 GiB
    device-to-device copy (TB/s, bytes read + written)."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    gemm = 2 * 8192**3 / time_fn([lambda: a @ b], 10) * 1e-9
    x = torch.empty(2 * 1024**3, device="cuda", dtype=torch.uint8)
    y = torch.empty_like(x)
    copy = 2 * x.numel() / time_fn([lambda: y.copy_(x)], 10) * 1e-9
    a = b = x = y = None  # free the 2.5 GB before the benchmark proper
    torch.cuda.empty_cache()
    return {"bf16_gemm_tflops": round(gemm, 1), "copy_tb_s": round(copy, 3)}


def record_header(lib, commit, ceil):
    """GPU, driver, software versions, commit, command, date and ceilings of a record."""
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.strip()
    return {"gpu": torch.cuda.get_device_name(), "driver": driver, "cuda": torch.version.cuda,
            "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
            "commit": commit, "library": lib.fa_build_info().decode(),
            "command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d"), "ceilings": ceil}
