"""flash_attn.bert_padding: moving between padded batches and packed (varlen) tokens.

The helpers that models import beside the attention functions, with flash_attn's names,
arguments and returns, in plain torch (any device, any dtype, differentiable):

  unpad_input(hidden_states, attention_mask, unused_mask=None)
      hidden_states (batch, seqlen, ...), attention_mask (batch, seqlen) bool/int, 1 = token ->
      (hidden_states_unpad (total, ...), indices int64 (total,), cu_seqlens int32 (batch + 1,),
       max_seqlen_in_batch int, seqused int32 (batch,))
      The tokens are taken in row-major order (batch, then position), wherever they sit in a row
      (left or right padding). With unused_mask (batch, seqlen), the tokens it marks are packed
      too and counted in cu_seqlens / max_seqlen, but not in seqused, which counts the tokens of
      attention_mask alone (flash_attn 2.7's fifth element, for the kernels' seqused_k).
  pad_input(hidden_states, indices, batch, seqlen)
      the inverse: (total, ...) -> (batch, seqlen, ...), zeros where no token was.
  index_first_axis(x, indices)             x[indices] along the first axis
  index_put_first_axis(values, indices, first_axis_dim)
                                            zeros (first_axis_dim, ...) with values at indices
  index_first_axis_residual(x, indices)    (x[indices], x)
  unpad_input_for_concatenated_sequences(hidden_states, attention_mask_in_length)
      several sequences packed into each row: attention_mask_in_length (batch, seqlen) holds in
      each row the lengths of that row's sequences (then zeros), whose tokens fill the row from
      its start -> (hidden_states_unpad, indices, cu_seqlens, max_seqlen_in_batch).

The indexing functions are autograd Functions whose backward scatters (or gathers) the
gradient, so only the gathered rows take part in the graph; everything else is torch's own ops.
"""
import torch

__all__ = ["IndexFirstAxis", "IndexPutFirstAxis", "IndexFirstAxisResidual", "index_first_axis",
           "index_put_first_axis", "index_first_axis_residual", "unpad_input", "pad_input",
           "unpad_input_for_concatenated_sequences"]


class IndexFirstAxis(torch.autograd.Function):
    """x[indices] along the first axis; the backward scatters the gradient into zeros."""

    @staticmethod
    def forward(ctx, x, indices):
        indices = indices.long()
        ctx.save_for_backward(indices)
        ctx.first_axis_dim = x.shape[0]
        return torch.index_select(x, 0, indices)

    @staticmethod
    def backward(ctx, grad):
        (indices,) = ctx.saved_tensors
        full = grad.new_zeros((ctx.first_axis_dim,) + tuple(grad.shape[1:]))
        full.index_copy_(0, indices, grad)  # indices are distinct: a copy, not a sum
        return full, None


class IndexPutFirstAxis(torch.autograd.Function):
    """A (first_axis_dim, ...) tensor of zeros with values placed at rows indices."""

    @staticmethod
    def forward(ctx, values, indices, first_axis_dim):
        indices = indices.long()
        ctx.save_for_backward(indices)
        out = values.new_zeros((int(first_axis_dim),) + tuple(values.shape[1:]))
        out.index_copy_(0, indices, values)
        return out

    @staticmethod
    def backward(ctx, grad):
        (indices,) = ctx.saved_tensors
        return torch.index_select(grad, 0, indices), None, None


class IndexFirstAxisResidual(torch.autograd.Function):
    """(x[indices], x): the gathered rows and the input itself, for callers that keep both."""

    @staticmethod
    def forward(ctx, x, indices):
        indices = indices.long()
        ctx.save_for_backward(indices)
        return torch.index_select(x, 0, indices), x.detach()

    @staticmethod
    def backward(ctx, grad, grad_residual):
        (indices,) = ctx.saved_tensors
        # autograd hands zeros for an unused output; the gathered rows flow through both.
        total = grad_residual.clone()
        total.index_add_(0, indices, grad)
        return total, None


index_first_axis = IndexFirstAxis.apply
index_put_first_axis = IndexPutFirstAxis.apply
index_first_axis_residual = IndexFirstAxisResidual.apply


def _flat_tokens(hidden_states):
    """(batch, seqlen, ...) -> (batch * seqlen, ...), a view where the strides allow."""
    return hidden_states.reshape((-1,) + tuple(hidden_states.shape[2:]))


def _prefix_sums(seqlens):
    """int32 (n + 1,) cumulative sums starting at 0, on seqlens' device."""
    cu = torch.zeros(seqlens.numel() + 1, dtype=torch.int32, device=seqlens.device)
    torch.cumsum(seqlens, dim=0, dtype=torch.int32, out=cu[1:])
    return cu


def _check_mask(name, mask, hidden_states):
    if mask.dim() != 2 or tuple(mask.shape) != tuple(hidden_states.shape[:2]):
        raise ValueError(f"{name}.shape={tuple(mask.shape)} must be (batch, seqlen) = "
                         f"{tuple(hidden_states.shape[:2])}, hidden_states' first two dims")


def unpad_input(hidden_states, attention_mask, unused_mask=None):
    """Packs the tokens of a padded batch: see the module docstring for the five returns."""
    _check_mask("attention_mask", attention_mask, hidden_states)
    used = attention_mask.bool()
    present = used
    if unused_mask is not None:
        _check_mask("unused_mask", unused_mask, hidden_states)
        present = used | unused_mask.bool()
    seqlens = present.sum(dim=-1, dtype=torch.int32)
    seqused = used.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(present.flatten()).flatten()
    max_seqlen = int(seqlens.max().item()) if seqlens.numel() else 0
    packed = index_first_axis(_flat_tokens(hidden_states), indices)
    return packed, indices, _prefix_sums(seqlens), max_seqlen, seqused


def pad_input(hidden_states, indices, batch, seqlen):
    """(total, ...) tokens at flat positions indices -> (batch, seqlen, ...), zero elsewhere."""
    full = index_put_first_axis(hidden_states, indices, int(batch) * int(seqlen))
    return full.reshape((int(batch), int(seqlen)) + tuple(hidden_states.shape[1:]))


def unpad_input_for_concatenated_sequences(hidden_states, attention_mask_in_length):
    """Rows that each hold several sequences back to back: see the module docstring."""
    _check_mask("attention_mask_in_length", attention_mask_in_length, hidden_states)
    lengths = attention_mask_in_length.to(torch.int64)
    row_tokens = lengths.sum(dim=-1)  # (batch,) tokens at the start of each row
    seqlen = hidden_states.shape[1]
    positions = torch.arange(seqlen, device=lengths.device)
    present = positions[None, :] < row_tokens[:, None]
    seqlens = lengths.flatten()
    seqlens = seqlens[seqlens != 0].to(torch.int32)  # row by row, in order
    indices = torch.nonzero(present.flatten()).flatten()
    max_seqlen = int(seqlens.max().item()) if seqlens.numel() else 0
    packed = index_first_axis(_flat_tokens(hidden_states), indices)
    return packed, indices, _prefix_sums(seqlens), max_seqlen
