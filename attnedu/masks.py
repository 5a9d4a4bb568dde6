"""Masks. One convention everywhere: a boolean mask is True where attention *may* look,
as in ``torch.nn.functional.scaled_dot_product_attention``.
"""

from __future__ import annotations

import torch

from ._validate import describe


def padding_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """(batch,) lengths -> (batch, max_len) bool mask, True at real tokens, False at padding.

    >>> padding_mask(torch.tensor([3, 1]), 4)
    tensor([[ True,  True,  True, False],
            [ True, False, False, False]])
    """
    if not isinstance(lengths, torch.Tensor) or lengths.dim() != 1:
        raise ValueError(f"lengths must be a 1-D tensor of shape (batch,), got {describe(lengths)}")
    if lengths.numel() and int(lengths.min()) < 1:
        bad = int(lengths.argmin())
        raise ValueError(
            f"sequence {bad} has length {int(lengths[bad])}; empty sequences cannot be attended over "
            "(drop them from the batch)"
        )
    if lengths.numel() and int(lengths.max()) > max_len:
        bad = int(lengths.argmax())
        raise ValueError(
            f"sequence {bad} has length {int(lengths[bad])} but the padded batch is only {max_len} long; "
            "lengths must not exceed the padded length"
        )
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]
