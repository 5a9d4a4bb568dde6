"""Argument checks that raise errors a learner can act on (never a bare assert)."""

from __future__ import annotations

import torch


def describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"a {x.dtype} tensor of shape {tuple(x.shape)}"
    return f"a {type(x).__name__}"


def check_tensor(name: str, x, dims: int, shape_doc: str) -> None:
    """Raise unless ``x`` is a tensor with ``dims`` dimensions (``shape_doc`` names them)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape {shape_doc}, got {describe(x)}")
    if x.dim() != dims:
        raise ValueError(f"{name} must have shape {shape_doc} ({dims} dimensions), got {describe(x)}")


def check_size(name: str, x: torch.Tensor, dim: int, expected: int, meaning: str, fix: str = "") -> None:
    """Raise unless ``x.shape[dim] == expected``; ``meaning`` says what that size is."""
    if x.shape[dim] != expected:
        msg = f"{name} has size {x.shape[dim]} in dimension {dim}, expected {expected} ({meaning}); got {describe(x)}"
        raise ValueError(msg + (f". {fix}" if fix else ""))
