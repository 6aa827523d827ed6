"""A/B of CPU library builds (and optionally torch) on a few cells, by alternating single calls.

    OMP_NUM_THREADS=2 python3 bench/cpu_ab.py new=build-cpu/libflashattn.so old=OLD/libflashattn.so \
        [--cells fp32:128:2048,bf16:128:1024] [--op fwd|fwdbwd] [--causal] [--rounds 12] [--torch]
    OMP_NUM_THREADS=1 python3 bench/cpu_ab.py new=... old=... --cpu-time

On a shared 2-core VM single cells of bench/cpu_torch_sdpa.py move by ±15% between runs, more
than one lever's effect. Here each round times one call of every build in turn (the order rotates,
each call after an untimed warm-up call), and the verdict is the median over rounds of each
build's time over the first build's time in the same round: a neighbour's burst slows the calls
of one round alike and cancels in the ratio. Cells are dtype:head_dim:seqlen, b 1, h 8, the
tensors and calls of bench/cpu_torch_sdpa.py. With --cpu-time (one thread only) each call is timed
by the calling thread's CPU time instead of wall time: when other sessions keep the load at 3-5,
2-thread wall-time ratios of two identical builds moved by +-10%, and a thread's CPU time leaves
out the time it was descheduled. Verdicts: docs/performance-log.md."""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_torch_sdpa as sdpa  # noqa: E402
import fa_ctypes  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("libs", nargs="+", metavar="NAME=PATH", help="builds; the first is the reference")
    ap.add_argument("--cells", default="fp32:128:2048,bf16:128:2048", help="dtype:d:s, comma-separated")
    ap.add_argument("--op", default="fwd", choices=["fwd", "fwdbwd"])
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--torch", action="store_true", help="time torch's CPU SDPA in the rounds too")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time by the calling thread's CPU time (needs OMP_NUM_THREADS=1)")
    a = ap.parse_args()
    threads = int(os.environ.get("OMP_NUM_THREADS", os.cpu_count()))
    if a.cpu_time and threads != 1:
        ap.error(f"--cpu-time: the calls must run on the calling thread alone; OMP_NUM_THREADS is {threads}, expected 1")
    clock = time.thread_time if a.cpu_time else time.perf_counter
    torch.set_num_threads(threads)
    libs = {n: fa_ctypes.load(p) for n, p in (x.split("=", 1) for x in a.libs)}
    gen = torch.Generator().manual_seed(0)
    for cell in a.cells.split(","):
        dt, d, s = cell.split(":")
        d, s = int(d), int(s)
        run = {n: sdpa.Ours(lib, sdpa.DTYPES[dt], 1, 8, s, d, a.causal, a.op, gen)
               for n, lib in libs.items()}
        if a.torch:
            run["torch"] = sdpa.Torch(sdpa.DTYPES[dt], 1, 8, s, d, a.causal, a.op, gen)
        names = list(run)
        ms = {n: [] for n in names}
        for r in range(a.rounds):
            for n in names[r % len(names):] + names[:r % len(names)]:
                run[n]()  # warm-up: the other build's threads have gone to sleep
                t0 = clock()
                run[n]()
                ms[n].append((clock() - t0) * 1e3)
        ref = names[0]
        line = f"{dt} d{d} s{s} {a.op}{' causal' if a.causal else ''}:"
        for n in names:
            paired = statistics.median(x / y for x, y in zip(ms[n], ms[ref]))
            line += (f" {n} median {statistics.median(ms[n]):.1f} ms, min {min(ms[n]):.1f},"
                     f" time / {ref} {paired:.3f};")
        print(line, flush=True)


if __name__ == "__main__":
    main()
