#!/usr/bin/env python3
"""Writes the seed corpus of fa_fuzz_api (tests/fuzz/corpus/, found/) from the tables below.

The byte format is the one tests/fuzz/fuzz_case.h and fuzz_case.cpp decode; the field order,
the ordinary mappings and the hostile tables below mirror them (keep the two in step). Each seed
is named for what it encodes: ok-* are valid calls that must pass, reject-* are calls the
library must refuse cleanly, regress-N-* reproduce case N of issue 23 (and fail until it is
fixed).

    python3 tests/fuzz/make_seeds.py [--out DIR] [--check]

found/ holds reproducers of bugs found beyond issue 23 that are not fixed yet (FOUND).

--check compares the files with what this script would write (non-zero exit on a difference).
"""
import argparse
import os
import struct
import sys

I64_MAX, I64_MIN = 2**63 - 1, -2**63
I32_MAX, I32_MIN = 2**31 - 1, -2**31
HOSTILE_TAG, RAW_TAG = 0xF0, 0xFF
HOSTILE64 = [0, -1, 1, I64_MIN, I64_MAX, I32_MAX, 2**31, 2**32, 2**40, 2**48, 2**61, 2**62,
             -2**31, I64_MAX - 1023, 3 * 2**61]
HOSTILE32 = [0, -1, 1, I32_MIN, I32_MAX, -2, 2, 3, 4, 5, 16, 255, 256, 65536, I32_MAX - 1]
HOSTILEF = ['nan', 'inf', '-inf', '-0', 'flt_max', '-flt_max', 'flt_min', 'denorm_min', 1e30,
            -1.0, 1.0, 'below_one', 1e-30, 65504.0, 1e4]
WIDE_HEAD_DIMS = [80, 96, 100, 128, 160, 192, 200, 224, 255, 256, 257, 512, 65, 63, 33, 17]
DTYPES = {'fp32': 0, 'fp16': 1, 'bf16': 2}
BACKENDS = {'auto': 0, 'flash': 1, 'reference': 2, 'vanilla': 3}
ROLES = ['q', 'k', 'v', 'out', 'lse', 'dout', 'dq', 'dk', 'dv', 'cu_seqlens_q', 'cu_seqlens_k',
         'alibi']
TENSOR_OPS = {'null': 0, 'misalign': 1, 'dtype': 2, 'rank': 3, 'shape0': 4, 'shape1': 5,
              'shape2': 6, 'shape3': 7, 'stride0': 8, 'stride1': 9, 'stride2': 10, 'stride3': 11,
              'device_type': 12, 'device_index': 13}
WORKSPACE_MODES = ['exact', 'more', 'less', 'null_queried', 'null_arg', 'misaligned', 'arg',
                   'empty']


class Writer:
    def __init__(self):
        self.out = bytearray()

    def u8(self, b):
        assert 0 <= b <= 255, b
        self.out.append(b)

    def tagged(self, value, ordinary, table, raw_bytes):
        """ordinary: the byte (< 0xF0) that decodes to value, or None."""
        if ordinary is not None and 0 <= ordinary < HOSTILE_TAG:
            self.u8(ordinary)
        elif value in table:
            self.u8(HOSTILE_TAG + table.index(value))
        else:
            self.u8(RAW_TAG)
            self.out += (value & (2**(8 * raw_bytes) - 1)).to_bytes(raw_bytes, 'little')

    def i64(self, value, ordinary=None):
        self.tagged(value, ordinary, HOSTILE64, 8)

    def i32(self, value, ordinary=None):
        self.tagged(value, ordinary, HOSTILE32, 4)

    def f32(self, value, ordinary=None):
        if ordinary is not None:
            self.u8(ordinary)
        elif value in HOSTILEF:
            self.u8(HOSTILE_TAG + HOSTILEF.index(value))
        else:
            self.u8(RAW_TAG)
            self.out += struct.pack('<f', value)


def below(value, lo, hi, inverse):
    """The ordinary byte for value when inverse(value) lands in [lo, hi), else None."""
    if isinstance(value, str):
        return None
    b = inverse(value)
    return b if b is not None and lo <= b < min(hi, HOSTILE_TAG) else None


def exact_int(x):
    return int(x) if float(x).is_integer() else None


def encode(s):
    """s: a dict of the fields of one case (see SEEDS); missing fields take the defaults.
    raw=HEX: the bytes of an input the fuzzer found, kept as it was (its comment says what it
    decodes to)."""
    if 'raw' in s:
        return bytes.fromhex(s['raw'])
    w = Writer()
    packed = 'lens' in s
    flags = (packed | (s.get('layout', 0) << 1) | (s.get('causal', False) << 3) |
             (('alibi' in s) << 4) | ((s.get('alibi') == '2d') << 5) |
             (s.get('deterministic', False) << 6) | (s.get('null_size_ptr', False) << 7))
    w.u8(flags)
    w.i32(0, DTYPES[s.get('dtype', 'fp32')])
    w.i32(0, BACKENDS[s.get('backend', 'flash')])
    w.u8({1: 0, 2: 2, 3: 3}[s.get('threads', 1)])
    for name, lo, hi in (('batch', 1, 5), ('heads_q', 1, 9), ('heads_kv', 1, 9)):
        v = s.get(name, 1)
        w.i64(v, v - 1 if lo <= v < hi else None)
    d = s.get('head_dim', 16)
    w.i64(d, d - 1 if 1 <= d <= 64 else (0xE0 + WIDE_HEAD_DIMS.index(d)
                                         if d in WIDE_HEAD_DIMS else None))
    if packed:
        assert len(s['lens']) == s.get('batch', 1) and len(s['lens']) <= 16
        for lq, lk in s['lens']:
            w.u8(lq)
            w.u8(lk)
        longest_q = max(l[0] for l in s['lens'])
        longest_k = max(l[1] for l in s['lens'])
    else:
        for name in ('seqlen_q', 'seqlen_k'):
            v = s.get(name, 1)
            w.i64(v, v if 0 <= v < HOSTILE_TAG else None)
        longest_q, longest_k = s.get('seqlen_q', 1), s.get('seqlen_k', 1)
    # max_seqlen: an int is an absolute value, ('+', n) the real longest plus n.
    for field, longest in (('max_seqlen_q_fwd', longest_q), ('max_seqlen_k_fwd', longest_k),
                           ('max_seqlen_q_bwd', longest_q), ('max_seqlen_k_bwd', longest_k)):
        v = s.get(field, ('+', 0))
        if isinstance(v, tuple):
            w.u8(v[1] + 2)
        else:
            w.i64(v, v - longest + 2 if 0 <= v - longest + 2 < HOSTILE_TAG else None)
    for name in ('window_left', 'window_right'):
        v = s.get(name, -1)
        w.i32(v, v + 1 if -1 <= v < HOSTILE_TAG - 1 else None)
    softcap = s.get('softcap', 0.0)
    w.f32(softcap, 0 if softcap == 0.0 else below(softcap, 0x80, 0xF0,
                                                   lambda x: exact_int(x * 4 + 0x7F)))
    scale = s.get('scale', 0.0)
    w.f32(scale, 0 if scale == 0.0 else below(scale, 0x80, 0xF0,
                                               lambda x: exact_int(x * 32 + 0xB0)))
    dropout = s.get('dropout', 0.0)
    w.f32(dropout, 0 if dropout == 0.0 else below(dropout, 0xB0, 0xF0,
                                                   lambda x: exact_int(x * 64 + 0xAF)))
    for name in ('seed', 'offset'):
        v = s.get(name, 0)
        w.i64(v, v if 0 <= v < HOSTILE_TAG else None)
    w.u8(s.get('data_seed', 0))
    w.u8(s.get('magnitude', 0))
    w.u8(s.get('poison', 0xFF))
    for name in ('ws_fwd', 'ws_bwd'):
        mode, arg = s.get(name, ('exact', 0))
        w.u8(WORKSPACE_MODES.index(mode))
        w.i64(arg, arg if 0 <= arg < HOSTILE_TAG else None)
    probe = s.get('status_probe', 0)
    w.i32(probe, probe if 0 <= probe < HOSTILE_TAG else None)
    edits = s.get('edits', [])
    assert len(edits) < 16
    w.u8(len(edits))
    for e in edits:
        kind = e[0]
        if kind == 'struct_size':
            w.u8(12)
            w.u8(0)
            w.i64(e[1])
        elif kind == 'null_params':
            w.u8(12)
            w.u8(1)
        elif kind == 'struct_size_v0_1':
            w.u8(12)
            w.u8(2)
        elif kind == 'cu':  # ('cu', 'q' | 'k', index, value)
            w.u8(13)
            w.u8(0 if e[1] == 'q' else 1)
            w.i64(e[2], e[2] if 0 <= e[2] < HOSTILE_TAG else None)
            w.i32(e[3], e[3] + 1 if -1 <= e[3] < HOSTILE_TAG - 1 else None)
        else:  # (role, op[, value])
            role, op = ROLES.index(kind), TENSOR_OPS[e[1]]
            w.u8(role)
            w.u8(op)
            if op == 0:
                continue
            v = e[2]
            if op == 1:
                w.i64(v, v if 0 <= v < 16 else None)
            elif op in (2, 3, 12, 13):
                w.i32(v, v if 0 <= v < 2 or (op == 2 and v < 5) or (op == 3 and v < 6) else None)
            else:
                w.i64(v, v if 0 <= v < HOSTILE_TAG else None)
    v = s.get('q_shift', 0)  # after the edits: inputs written before 0.2 read 0
    w.i64(v, v + 0x40 if 0 <= v + 0x40 < HOSTILE_TAG else None)
    return bytes(w.out)


# name -> fields. Defaults: fp32, FLASH, 1 thread, batch / heads 1, head_dim 16, fixed length 1,
# max_seqlen exact, no mask, exact workspaces.
SEEDS = {
    # Ordinary valid calls: every one must pass.
    'ok-fixed-fp32-basic': dict(batch=2, heads_q=2, heads_kv=2, seqlen_q=17, seqlen_k=33),
    'ok-fixed-fp16-causal': dict(dtype='fp16', heads_q=2, heads_kv=2, seqlen_q=70, seqlen_k=40,
                                 causal=True, data_seed=1),
    'ok-fixed-bf16-window-softcap': dict(dtype='bf16', seqlen_q=65, seqlen_k=90, window_left=20,
                                         window_right=5, softcap=7.5, head_dim=32, data_seed=2),
    'ok-packed-fp32-empty-seqs': dict(batch=4, lens=[(5, 0), (0, 12), (30, 65), (1, 1)],
                                      heads_q=2, heads_kv=2, data_seed=3),
    'ok-packed-fp16-gqa-alibi': dict(dtype='fp16', batch=3, lens=[(9, 40), (33, 7), (0, 0)],
                                     heads_q=4, heads_kv=2, alibi='1d', data_seed=4),
    'ok-fixed-fp32-dropout-alibi2d': dict(batch=2, heads_q=3, heads_kv=1, seqlen_q=20,
                                          seqlen_k=70, dropout=0.25, seed=7, alibi='2d',
                                          data_seed=5),
    'ok-fixed-bf16-gqa8-padded-layout': dict(dtype='bf16', heads_q=8, heads_kv=1, seqlen_q=31,
                                             seqlen_k=31, layout=1, causal=True, data_seed=6),
    'ok-fixed-fp32-headmajor-d128': dict(head_dim=128, seqlen_q=12, seqlen_k=64, layout=2,
                                         scale=0.5, data_seed=7),
    'ok-packed-bf16-maxseqlen-claimed-larger': dict(dtype='bf16', batch=2, lens=[(10, 20), (3, 4)],
                                                    max_seqlen_q_fwd=('+', 100),
                                                    max_seqlen_k_fwd=('+', 100),
                                                    max_seqlen_q_bwd=('+', 50), data_seed=8),
    'ok-fixed-fp16-threads2-workspace-less': dict(dtype='fp16', threads=2, heads_q=2, heads_kv=2,
                                                  seqlen_q=100, seqlen_k=30,
                                                  ws_fwd=('less', 64), ws_bwd=('misaligned', 3),
                                                  magnitude=2, data_seed=9),
    'ok-fixed-fp32-zero-strides': dict(batch=2, seqlen_q=5, seqlen_k=6, layout=3, data_seed=10),
    # Calls the library must refuse without writing anything.
    'reject-head-dim-257': dict(head_dim=257, seqlen_q=4, seqlen_k=4),
    'reject-cu-seqlens-not-monotone': dict(batch=2, lens=[(4, 4), (4, 4)],
                                           edits=[('cu', 'q', 1, 6)]),
    # lse NULL: accepted by the forward since fa_params 0.2 (not computed), refused by the backward.
    'ok-fwd-lse-null-bwd-refused': dict(seqlen_q=4, seqlen_k=4, edits=[('lse', 'null')]),
    'reject-q-misaligned-fp32': dict(seqlen_q=4, seqlen_k=4, edits=[('q', 'misalign', 2)]),
    'reject-dropout-one': dict(seqlen_q=4, seqlen_k=4, dropout=1.0),
    'reject-workspace-null': dict(seqlen_q=4, seqlen_k=4, ws_fwd=('null_arg', 2**62),
                                  ws_bwd=('null_queried', 0)),
    'reject-struct-size': dict(seqlen_q=4, seqlen_k=4, edits=[('struct_size', 8)]),
    'reject-q-shift-int64-max': dict(seqlen_q=4, seqlen_k=4, q_shift=I64_MAX),
    # fa_params 0.2's q_shift (a query chunk of a longer sequence), with causal and ALiBi; and a
    # 0.1-size struct, whose library ignores it.
    'ok-fixed-fp32-causal-alibi-q-shift': dict(batch=1, heads_q=2, heads_kv=1, seqlen_q=20,
                                               seqlen_k=50, causal=True, alibi='1d',
                                               q_shift=-13, data_seed=9),
    'ok-struct-size-v0-1-ignores-q-shift': dict(seqlen_q=9, seqlen_k=30, causal=True, q_shift=-5,
                                                edits=[('struct_size_v0_1',)], data_seed=10),
    'reject-max-seqlen-below-longest': dict(batch=2, lens=[(9, 3), (2, 2)],
                                            max_seqlen_q_fwd=('+', -1),
                                            max_seqlen_q_bwd=('+', -2)),
    'reject-scale-nan-size-ptr-null': dict(seqlen_q=3, seqlen_k=3, scale='nan',
                                           null_size_ptr=True),
    # Issue 23, one seed per case: each fails on the unfixed library.
    # 1: max_seqlen_q = 2^62 wraps the backward's workspace arithmetic. The forward runs with the
    # exact max_seqlen (its outputs feed the backward); the backward claims 2^62.
    'regress-1a-bwd-maxseqlen-2e62-wrong-grads': dict(batch=2, lens=[(10, 20), (7, 5)],
                                                     max_seqlen_q_bwd=2**62, data_seed=11),
    # ... and with a sequence long enough (1800 queries, d 1) that the dQ accumulator, carved
    # with a wrapped size, runs past the end of the workspace.
    'regress-1b-bwd-maxseqlen-2e62-heap-overflow': dict(
        batch=1, lens=[(200, 1)], head_dim=1, max_seqlen_q_fwd=1800, max_seqlen_q_bwd=2**62,
        data_seed=12, edits=[('cu', 'q', 1, 1800), ('q', 'shape0', 1800), ('out', 'shape0', 1800),
                             ('dout', 'shape0', 1800), ('dq', 'shape0', 1800),
                             ('lse', 'shape1', 1800)]),
    # 2: the reference backend with both max_seqlen at INT64_MAX.
    'regress-2-ref-maxseqlen-int64max': dict(backend='reference', batch=1, lens=[(3, 3)],
                                             max_seqlen_q_fwd=I64_MAX, max_seqlen_k_fwd=I64_MAX,
                                             max_seqlen_q_bwd=I64_MAX, max_seqlen_k_bwd=I64_MAX),
    # 3: the forward's cost follows the claimed length.
    'regress-3-fwd-maxseqlen-2e62-hang': dict(batch=1, lens=[(5, 5)], max_seqlen_q_fwd=2**62),
    # 4: query and run disagree (two threads: the query's per-thread product wraps). The forward
    # is refused for its NULL workspace so that the hang of case 3 does not come first.
    'regress-4-bwd-maxseqlen-2e61-query-run-disagree': dict(threads=2, batch=1, lens=[(6, 6)],
                                                            max_seqlen_q_bwd=2**61,
                                                            ws_fwd=('null_queried', 0)),
    # 5: fixed-length element counts that overflow int64, with zero strides.
    'regress-5-fixed-batch-2e32-seqlen-2e32-zero-strides': dict(
        batch=2**32, seqlen_q=2**32, seqlen_k=2**32, layout=3),
    # Found by the fuzzer: fa_status_string(-1) from C loaded an fa_status outside its
    # enumerators' range on the C++ side (UBSan: "load of value 4294967295, which is not a valid
    # value for type 'fa_status'").
    'regress-status-string-out-of-range': dict(seqlen_q=4, seqlen_k=4, status_probe=-1),
    # Found by the fuzzer, a harness bound: fp32, batch 3, d 2, 23 x 64, softcap 4.5e-40 (an fp32
    # subnormal), dropout 2.4e-38. d logit / dx = 1 - tanh²(x / softcap) is then a step at
    # x = 0, which the fp32 and fp64 backends place on either side (dQ 0 against 0.024); the
    # tolerance now counts that slope (fuzz_compare.h).
    'regress-fuzz-softcap-subnormal-gradients': dict(
        raw='0000ff00000000f1ba40400117404c4500000000ff00e8040001ffffffff00b3ff000c01480000000000'
            '0000'),
    # Found by the fuzzer: softmax_scale = FLT_MAX overflows scale * q in fp32 (the flash
    # backend's NaN against the reference's finite values): outside what fp32 kernels promise,
    # compared by nothing (fuzz_compare.h), and must not crash.
    'regress-fuzz-scale-flt-max': dict(raw='0a0201000007000f1f1f020000060009ffffff0000f4'),
    # Found by the fuzzer, a harness bug: the forward's dout (which the call does not read) with
    # dtype fp8 was scanned for its norm as fp32, reading past its 1-byte elements.
    # Found by the fuzzer (the H200 machine's run), a harness bound: fp16, dropout_p = 1 - 2^-24
    # (kept probabilities scaled by 1.7e7: out overflows fp16 to inf), so the flash backward's
    # D = rowsum(dO * out) and its dQ are NaN where the fp64 reference's are not; gradients are
    # not compared where out's bound leaves the dtype's range.
    'regress-fuzz-fp16-out-overflow-gradients': dict(
        raw='002b0100160000002b1702020200060000ffffff1604fb0300003a2076616c7565206973206e6f7420640404'
            '04040404040404044e565f4c49424e50505f44040404040404040404040404040404040404046566696e6564'
            '00'),
    # Found by the fuzzer once q_shift was in the format, a library bug: fp32, 2 x 2, d 16,
    # window_right 30, q_shift -64: no query sees the key block, yet the CPU flash backward ran
    # its query loop (row_begin == row_end > 0) on the K tile it had not loaded (dQ NaN).
    'regress-fuzz-q-shift-block-seen-by-no-row': dict(raw='000001000000000f020200080000001f0040'),
    'regress-fuzz-fp8-dout-in-forward': dict(
        raw='088101803a0000000101320f46fbfbfb9191910291ff000000919191919191803a0000000101320f46fbfbfb'
            '9191910291ff0000009117d5d5d5919191919191'),
}


# Reproducers of bugs the fuzzer found beyond issue 23 (tests/fuzz/found/): each fails until its
# fix lands, then moves to SEEDS. scripts/fuzz.sh runs them and reports them without failing.
FOUND = {}


def write(seeds, out, check):
    """Writes (or, with check, compares) one directory; returns the names that differ."""
    os.makedirs(out, exist_ok=True)
    stale = []
    for name, fields in seeds.items():
        data = encode(fields)
        path = os.path.join(out, name)
        if check:
            if not os.path.exists(path) or open(path, 'rb').read() != data:
                stale.append(name)
            continue
        with open(path, 'wb') as f:
            f.write(data)
    return stale + sorted(set(os.listdir(out)) - set(seeds))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--out', default=here, help='directory to hold corpus/ and found/')
    ap.add_argument('--check', action='store_true')
    args = ap.parse_args()
    stale = []
    for seeds, sub in ((SEEDS, 'corpus'), (FOUND, 'found')):
        stale += [f'{sub}/{n}' for n in write(seeds, os.path.join(args.out, sub), args.check)]
    if args.check and stale:
        print('make_seeds: out of date: ' + ', '.join(stale), file=sys.stderr)
        return 1
    if not args.check:
        print(f'make_seeds: wrote {len(SEEDS)} seeds to corpus/, {len(FOUND)} to found/ '
              f'under {args.out}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
