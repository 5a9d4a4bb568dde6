"""Argument checks that raise errors a learner can act on (never a bare assert): each names what was
expected, what came, and the likely fix."""

from __future__ import annotations

import torch


def describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"a {x.dtype} tensor of shape {tuple(x.shape)}"
    return f"a {type(x).__name__}"


def check_tensor(name: str, x, dims: int, shape_doc: str) -> None:
    """Raise unless ``x`` is a tensor with ``dims`` dimensions (``shape_doc`` names them)."""
    if not isinstance(x, torch.Tensor):
        fix = " Convert it with torch.as_tensor(...)." if hasattr(x, "__len__") or hasattr(x, "shape") else ""
        raise TypeError(f"{name} must be a torch.Tensor of shape {shape_doc}, got {describe(x)}.{fix}")
    if x.dim() != dims:
        raise ValueError(f"{name} must have shape {shape_doc} ({dims} dimensions), got {describe(x)}")


def check_min_dims(name: str, x, dims: int, shape_doc: str) -> None:
    """Raise unless ``x`` is a tensor with at least ``dims`` dimensions."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape {shape_doc}, got {describe(x)}")
    if x.dim() < dims:
        raise ValueError(f"{name} must have shape {shape_doc} (at least {dims} dimensions), got {describe(x)}")


def check_size(name: str, x: torch.Tensor, dim: int, expected: int, meaning: str, fix: str = "") -> None:
    """Raise unless ``x.shape[dim] == expected``; ``meaning`` says what that size is."""
    if x.shape[dim] != expected:
        msg = f"{name} has size {x.shape[dim]} in dimension {dim}, expected {expected} ({meaning}); got {describe(x)}"
        raise ValueError(msg + (f". {fix}" if fix else ""))


def check_float(name: str, x: torch.Tensor) -> None:
    """Raise unless ``x`` holds floating-point numbers (a bool or integer tensor is a likely mix-up)."""
    if not x.is_floating_point():
        mix_up = x.dtype in (torch.bool, torch.long)
        hint = " Is this a mask or token ids passed where numbers belong?" if mix_up else ""
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}.{hint}")


def check_same_dtype(**tensors: torch.Tensor) -> None:
    dtypes = {name: t.dtype for name, t in tensors.items()}
    if len(set(dtypes.values())) > 1:
        listed = ", ".join(f"{name} {dtype}" for name, dtype in dtypes.items())
        raise TypeError(f"these tensors must share one dtype, got {listed}; convert with .to(dtype)")


def check_bool_mask(name: str, mask) -> None:
    """Raise unless ``mask`` is a bool tensor (the course's convention: True = may attend)."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(
            f"{name} must be a bool torch.Tensor (True = may attend), got {describe(mask)}; "
            "convert with torch.as_tensor(mask, dtype=torch.bool)"
        )
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must be a bool tensor (True = may attend), got dtype {mask.dtype}. An additive float mask "
            "(0 / -inf) or a 0/1 integer mask must be converted first, e.g. attnedu.masks.from_additive(mask) "
            "or mask.bool()"
        )


def check_positive_int(name: str, value, meaning: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} ({meaning}) must be a positive int, got {value!r}")
