"""The order in which bench/gpu_bench.py times a cell's backends, round by round.

A backend timed right after cuDNN's backward reads slow: up to 14% with five warm-up calls, and
still ~0.5% with 200 ms of its own warm-up (docs/performance-log.md, thirteenth and fourteenth
sessions). With the order merely rotated, the same backend follows cuDNN in every other round
and FA2 never does. The rounds here form a Williams design instead: every backend takes every
position, and within the rounds every backend directly follows every other the same number of
times (once each for an even count of backends, in as many rounds; twice for an odd count, in
twice as many), so that such an after-effect weighs on all of them alike. Torch-free, so that
it is tested without a GPU (tests/fa_bench/round_order_test.py)."""


def williams_rows(n):
    """Rows of indices 0..n-1: n rows for even n, 2n for odd n (each row's reverse added), in
    which each ordered pair (a, b), a != b, stands adjacent the same number of times."""
    if n <= 0:
        return []
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:  # 0, 1, n-1, 2, n-2, ...
        if len(first) % 2:
            first.append(lo)
            lo += 1
        else:
            first.append(hi)
            hi -= 1
    rows = [[(x + r) % n for x in first] for r in range(n)]
    if n % 2:
        rows += [row[::-1] for row in rows]
    return rows


def round_orders(names, rounds=None):
    """The backends' order in each round: the Williams design's rows over names, as many rounds
    as it has rows unless `rounds` says otherwise (then its rows cyclically: fewer than the
    design's rows are not balanced)."""
    rows = williams_rows(len(names))
    if not rows:
        return []
    count = len(rows) if rounds is None else rounds
    return [[names[i] for i in rows[r % len(rows)]] for r in range(count)]
