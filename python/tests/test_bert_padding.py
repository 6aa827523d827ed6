"""flashattn.bert_padding against hand-built expectations: what each helper returns for small
batches written out by hand (left and right padding, an empty row, flash_attn 2.7's used-seqlens
element with an unused mask, rows of concatenated sequences), round trips, gradients, and the
import through install_as_flash_attn."""
import os
import subprocess
import sys

import pytest
import torch

import flashattn
from flashattn.bert_padding import (index_first_axis, index_first_axis_residual,
                                    index_put_first_axis, pad_input, unpad_input,
                                    unpad_input_for_concatenated_sequences)

# Row 0 right-padded (3 tokens), row 1 left-padded (2), row 2 empty, row 3 full (4).
MASK = torch.tensor([[1, 1, 1, 0],
                     [0, 0, 1, 1],
                     [0, 0, 0, 0],
                     [1, 1, 1, 1]])


def hidden(batch=4, seqlen=4, *tail, grad=False):
    # Every token's value names its (row, position): 10 * row + position (+ a feature offset).
    base = torch.arange(batch * seqlen, dtype=torch.float64).reshape(batch, seqlen)
    base = (base // seqlen) * 10 + base % seqlen
    x = base.reshape(batch, seqlen, *([1] * len(tail))) + torch.zeros(batch, seqlen, *tail,
                                                                      dtype=torch.float64)
    if tail:
        x = x + torch.arange(tail[-1], dtype=torch.float64) / 100
    return x.requires_grad_(grad)


@pytest.mark.parametrize("mask_dtype", [torch.int64, torch.int32, torch.bool])
def test_unpad_input_returns_tokens_indices_cu_seqlens_max_and_used(mask_dtype):
    x = hidden(4, 4, 3, 2)
    packed, indices, cu, max_seqlen, used = unpad_input(x, MASK.to(mask_dtype))
    assert indices.tolist() == [0, 1, 2, 6, 7, 12, 13, 14, 15]
    assert indices.dtype == torch.int64
    assert cu.tolist() == [0, 3, 5, 5, 9] and cu.dtype == torch.int32
    assert max_seqlen == 4 and isinstance(max_seqlen, int)
    assert used.tolist() == [3, 2, 0, 4] and used.dtype == torch.int32
    assert packed.shape == (9, 3, 2)
    assert packed[:, 0, 0].tolist() == [0, 1, 2, 12, 13, 30, 31, 32, 33]
    torch.testing.assert_close(packed[:, :, 1] - packed[:, :, 0],
                               torch.full((9, 3), 0.01, dtype=torch.float64))


def test_unpad_input_with_unused_mask_counts_them_in_cu_seqlens_not_in_used():
    x = hidden(4, 4, 2)
    unused = torch.tensor([[0, 0, 0, 1],  # row 0's padding slot holds an unused token
                           [0, 1, 0, 0],
                           [0, 0, 0, 0],
                           [0, 0, 0, 0]], dtype=torch.bool)
    packed, indices, cu, max_seqlen, used = unpad_input(x, MASK, unused)
    assert indices.tolist() == [0, 1, 2, 3, 5, 6, 7, 12, 13, 14, 15]
    assert cu.tolist() == [0, 4, 7, 7, 11]
    assert max_seqlen == 4
    assert used.tolist() == [3, 2, 0, 4]
    assert packed[:, 0].tolist() == [0, 1, 2, 3, 11, 12, 13, 30, 31, 32, 33]


def test_pad_input_places_tokens_and_zeros_and_round_trips():
    x = hidden(4, 4, 5)
    packed, indices, *_ = unpad_input(x, MASK)
    back = pad_input(packed, indices, 4, 4)
    assert back.shape == x.shape and back.dtype == x.dtype
    keep = MASK.bool()[:, :, None]
    assert torch.equal(back, torch.where(keep, x, torch.zeros_like(x)))
    # And the other way: packed -> padded -> packed is the identity.
    again, indices2, *_ = unpad_input(back, MASK)
    assert torch.equal(again, packed) and torch.equal(indices2, indices)


def test_gradients_flow_to_the_tokens_only():
    x = hidden(4, 4, 3, grad=True)
    packed, indices, *_ = unpad_input(x, MASK)
    w = torch.randn(packed.shape, dtype=torch.float64)
    (packed * w).sum().backward()
    expected = torch.zeros_like(x)
    expected.reshape(16, 3)[indices] = w
    assert torch.equal(x.grad, expected)

    tokens = torch.randn(9, 3, dtype=torch.float64, requires_grad=True)
    padded = pad_input(tokens, indices, 4, 4)
    g = torch.randn(padded.shape, dtype=torch.float64)
    (padded * g).sum().backward()
    assert torch.equal(tokens.grad, g.reshape(16, 3)[indices])


def test_index_functions_pass_gradcheck():
    idx = torch.tensor([4, 0, 2])
    x = torch.randn(6, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: index_first_axis(t, idx), (x,))
    vals = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: index_put_first_axis(t, idx, 6), (vals,))
    assert torch.autograd.gradcheck(lambda t: index_first_axis_residual(t, idx), (x,))


def test_index_first_axis_and_put_by_hand():
    x = torch.arange(12.0).reshape(6, 2)
    idx = torch.tensor([5, 1, 3], dtype=torch.int32)  # int32 indices are taken too
    assert index_first_axis(x, idx).tolist() == [[10, 11], [2, 3], [6, 7]]
    put = index_put_first_axis(torch.tensor([[1.0], [2.0], [3.0]]), idx, 6)
    assert put.flatten().tolist() == [0, 2, 0, 3, 0, 1]
    picked, residual = index_first_axis_residual(x, idx)
    assert torch.equal(picked, x[idx.long()]) and torch.equal(residual, x)


def test_unpad_input_for_concatenated_sequences():
    x = hidden(2, 5, 2)
    # Row 0 holds sequences of 2 and 2 tokens (then one pad), row 1 one of 3 then 1 of 1.
    lengths = torch.tensor([[2, 2, 0, 0, 0],
                            [3, 1, 0, 0, 0]])
    packed, indices, cu, max_seqlen = unpad_input_for_concatenated_sequences(x, lengths)
    assert indices.tolist() == [0, 1, 2, 3, 5, 6, 7, 8]
    assert cu.tolist() == [0, 2, 4, 7, 8] and cu.dtype == torch.int32
    assert max_seqlen == 3
    assert packed[:, 0].tolist() == [0, 1, 2, 3, 10, 11, 12, 13]


def test_varlen_attention_over_unpadded_batch_equals_per_row_attention(gen):
    b, s, h, d = 3, 7, 2, 16
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [0] * 2 + [1] * 5])
    q, k, v = (torch.randn(b, s, h, d, generator=gen) for _ in range(3))
    qu, idx, cu, max_s, _ = unpad_input(q, mask)
    ku, vu = unpad_input(k, mask)[0], unpad_input(v, mask)[0]
    out = pad_input(flashattn.flash_attn_varlen_func(qu, ku, vu, cu, cu, max_s, max_s,
                                                     causal=True), idx, b, s)
    for r in range(b):
        sel = mask[r].bool()
        ref = flashattn.flash_attn_func(q[r:r + 1, sel], k[r:r + 1, sel], v[r:r + 1, sel],
                                        causal=True)
        torch.testing.assert_close(out[r, sel], ref[0], rtol=0, atol=1e-6)
        assert torch.all(out[r, ~sel] == 0)


def test_install_as_flash_attn_serves_bert_padding():
    code = ("import flashattn\nflashattn.install_as_flash_attn()\n"
            "import flash_attn.bert_padding\n"
            "from flash_attn.bert_padding import pad_input, unpad_input, index_first_axis\n"
            "from flash_attn import bert_padding\n"
            "assert unpad_input is flashattn.bert_padding.unpad_input\n"
            "assert bert_padding is flashattn.bert_padding\nprint('ok')\n")
    pkg = os.path.dirname(os.path.dirname(flashattn.__file__))
    res = subprocess.run([sys.executable, "-c", code], cwd=pkg, capture_output=True, text=True,
                         timeout=120)
    assert res.stdout.strip() == "ok", res.stdout + res.stderr
