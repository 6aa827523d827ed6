#!/usr/bin/env python3
"""bench/round_order.py: every round times each backend once, each backend takes each position
equally often, and within rounds every ordered pair of backends stands adjacent equally often."""
import collections
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from round_order import round_orders, williams_rows  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


for n in range(1, 8):
    names = [f"b{i}" for i in range(n)]
    orders = round_orders(names)
    check(len(orders) == (n if n % 2 == 0 else 2 * n), f"n={n}: {len(orders)} rounds")
    for o in orders:
        check(sorted(o) == sorted(names), f"n={n}: round {o} is not a permutation")
    positions = collections.Counter((name, i) for o in orders for i, name in enumerate(o))
    check(len(set(positions.values())) == 1 and len(positions) == n * n,
          f"n={n}: positions unbalanced {positions}")
    pairs = collections.Counter((a, b) for o in orders for a, b in zip(o, o[1:]))
    if n > 1:
        check(len(pairs) == n * (n - 1) and len(set(pairs.values())) == 1,
              f"n={n}: adjacent pairs unbalanced {pairs}")
# The default backward's four backends: four rounds, and each of the other three follows cuDNN
# exactly once within a round.
four = ["flashattn", "flashattn-det", "torch-fa2", "torch-cudnn"]
orders = round_orders(four)
after_cudnn = collections.Counter(b for o in orders for a, b in zip(o, o[1:]) if a == "torch-cudnn")
check(len(orders) == 4 and after_cudnn == {n: 1 for n in four[:3]}, f"after cuDNN: {after_cudnn}")
# An explicit count cycles through the design's rows.
check(round_orders(four, 6)[4:] == round_orders(four)[:2], "rounds=6 does not cycle")
check(round_orders([]) == [] and williams_rows(0) == [], "empty")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("round_order: ok")
