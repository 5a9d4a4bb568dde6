"""Argument checks that raise errors a learner can act on (never a bare assert).

Every message has one form: ``<name> should be <what was expected>, got <what came>; <the likely fix>``.
A wrong value or shape raises ``ValueError``; a wrong type (a list or NumPy array where a tensor belongs, a
float or a bool where an int belongs, token ids where numbers belong) raises ``TypeError``.
"""

from __future__ import annotations

import difflib
import math
import numbers
import operator
from collections.abc import Sequence

import numpy as np
import torch


def describe(x) -> str:
    """What came, in words: 'a torch.float32 tensor of shape (2, 3)', 'a NumPy array ...', "'abc' (a str)"."""
    if isinstance(x, torch.Tensor):
        return f"a {x.dtype} tensor of shape {tuple(x.shape)}"
    if isinstance(x, np.ndarray):
        return f"a NumPy array of dtype {x.dtype} and shape {x.shape}"
    if isinstance(x, (bool, np.bool_)):
        return f"the bool {bool(x)}"
    if x is None or isinstance(x, (numbers.Number, str)):
        text = repr(x)
        kind = type(x).__name__
        return f"{text if len(text) <= 40 else text[:37] + '...'} ({'an' if kind[0] in 'aeiou' else 'a'} {kind})"
    if isinstance(x, (list, tuple, dict, set)):
        return f"a {type(x).__name__} of {len(x)} items"
    return f"a {type(x).__name__}"


def _fail(error: type[Exception], name: str, expected: str, x, fix: str = "", got: str | None = None):
    message = f"{name} should be {expected}, got {describe(x) if got is None else got}"
    raise error(message + (f"; {fix}" if fix else ""))


def _conversion(x, dtype: str = "") -> str:
    """How to turn what came into a tensor."""
    if isinstance(x, np.ndarray):
        target = dtype or ("torch.float32" if x.dtype.kind == "f" else "")
        return f"convert it with torch.as_tensor(array{', dtype=' + target if target else ''})"
    if isinstance(x, (list, tuple)):
        return f"convert it with torch.tensor(...{', dtype=' + dtype if dtype else ''})"
    return ""


def _dims_text(dims) -> str:
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    return " or ".join(str(d) for d in dims) + " dimensions"


def check_tensor(name: str, x, dims, shape_doc: str, *, allow_empty: bool = False) -> None:
    """Raise unless ``x`` is a tensor with ``dims`` dimensions (an int, or a tuple of allowed counts), named by
    ``shape_doc``; an empty tensor (a dimension of size 0) is refused unless ``allow_empty``."""
    if not isinstance(x, torch.Tensor):
        _fail(TypeError, name, f"a torch.Tensor of shape {shape_doc}", x, _conversion(x))
    allowed = (dims,) if isinstance(dims, int) else tuple(dims)
    if x.dim() not in allowed:
        if x.dim() + 1 == min(allowed):
            fix = f"for a single example add the batch dimension: {name}[None]"
        elif x.dim() == max(allowed) + 1 and x.shape[0] == 1:
            fix = f"drop the extra leading dimension of size 1: {name}[0]"
        else:
            fix = "check which tensor you passed, and its order of dimensions"
        _fail(ValueError, name, f"of shape {shape_doc} ({_dims_text(allowed)})", x, fix)
    if not allow_empty and x.numel() == 0:
        _fail(ValueError, name, f"of shape {shape_doc} with no dimension of size 0", x,
              "an empty batch or sequence has nothing to attend over: leave it out")  # fmt: skip


def check_min_dims(name: str, x, dims: int, shape_doc: str, *, allow_empty: bool = False) -> None:
    """Raise unless ``x`` is a tensor with at least ``dims`` dimensions."""
    if not isinstance(x, torch.Tensor):
        _fail(TypeError, name, f"a torch.Tensor of shape {shape_doc}", x, _conversion(x))
    if x.dim() < dims:
        fix = f"for a single example add the batch dimension: {name}[None]" if x.dim() + 1 == dims else ""
        _fail(ValueError, name, f"of shape {shape_doc} (at least {dims} dimensions)", x, fix)
    if not allow_empty and x.numel() == 0:
        _fail(ValueError, name, f"of shape {shape_doc} with no dimension of size 0", x,
              "an empty batch or sequence has nothing to attend over: leave it out")  # fmt: skip


def check_size(name: str, x: torch.Tensor, dim: int, expected: int, meaning: str, fix: str = "") -> None:
    """Raise unless ``x.shape[dim] == expected``; ``meaning`` says what that size is."""
    if x.shape[dim] != expected:
        _fail(ValueError, name, f"of size {expected} in dimension {dim} ({meaning})", x, fix)


def check_float(name: str, x) -> None:
    """Raise unless ``x`` is a tensor of floating-point numbers (a bool or integer tensor is a likely mix-up)."""
    if not isinstance(x, torch.Tensor):
        _fail(TypeError, name, "a floating-point torch.Tensor", x, _conversion(x, "torch.float32"))
    if not x.is_floating_point():
        if x.dtype == torch.bool:
            fix = "a bool tensor is a mask: pass it as the mask, or convert numbers with .float()"
        elif x.dtype in (torch.long, torch.int32, torch.int16, torch.int8, torch.uint8):
            fix = "integer tensors hold token ids or counts: embed ids first, or convert numbers with .float()"
        else:
            fix = "convert it with .float()"
        _fail(TypeError, name, "a floating-point tensor", x, fix, got=f"dtype {x.dtype}")


def check_finite(name: str, x: torch.Tensor, fix: str = "") -> None:
    """Raise if ``x`` holds NaN or infinity (for inputs where one would be hidden rather than propagate)."""
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        first = tuple(int(i) for i in torch.nonzero(bad)[0])
        got = f"{int(bad.sum())} NaN or infinite entries (the first at index {first}: {x[first].item()})"
        _fail(ValueError, name, "finite numbers", x, fix, got=got)


def check_same_dtype(**tensors: torch.Tensor) -> None:
    dtypes = {name: t.dtype for name, t in tensors.items()}
    if len(set(dtypes.values())) > 1:
        names = ", ".join(dtypes)
        listed = ", ".join(f"{name} {dtype}" for name, dtype in dtypes.items())
        raise TypeError(
            f"{names} should share one dtype, got {listed}; convert with .to(dtype) (a tensor made from NumPy "
            "is float64: use torch.as_tensor(array, dtype=torch.float32))"
        )


def check_bool_mask(name: str, mask) -> None:
    """Raise unless ``mask`` is a bool tensor (the course's convention: True = may attend)."""
    if not isinstance(mask, torch.Tensor):
        how = "torch.from_numpy(mask)" if isinstance(mask, np.ndarray) else "torch.as_tensor(mask, dtype=torch.bool)"
        _fail(TypeError, name, "a bool torch.Tensor (True = may attend)", mask, f"convert with {how}")
    if mask.dtype != torch.bool:
        _fail(TypeError, name, "a bool tensor (True = may attend)", mask,
              "an additive float mask (0 / -inf) or a 0/1 integer mask must be converted first, e.g. "
              "attnedu.masks.from_additive(mask) or mask.bool()", got=f"dtype {mask.dtype}")  # fmt: skip


def check_int(name: str, value, meaning: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as an int, or raise: TypeError for a bool, a float or anything else that is not a whole
    number (a NumPy integer or a one-element integer tensor is fine), ValueError outside [minimum, maximum]."""
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, torch.Tensor) and value.dtype == torch.bool):
        _fail(TypeError, f"{name} ({meaning})", "an int", value, "a bool is not a count: pass a number")
    try:
        number = operator.index(value)
    except TypeError:
        fix = f"pass int({value!r})" if isinstance(value, float) and value.is_integer() else ""
        _fail(TypeError, f"{name} ({meaning})", "an int", value, fix)
    low = "" if minimum is None else f"{minimum} <= "
    high = "" if maximum is None else f" <= {maximum}"
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        _fail(ValueError, f"{name} ({meaning})", f"an int with {low}{name}{high}", value)
    return number


def check_positive_int(name: str, value, meaning: str) -> int:
    return check_int(name, value, meaning, minimum=1)


def check_number(name: str, value, meaning: str, minimum: float | None = None, *, strict: bool = False) -> float:
    """Return ``value`` as a float, or raise: TypeError unless a real number (not a bool), ValueError if NaN,
    infinite, or below ``minimum`` (at or below it with ``strict``)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.dtype != torch.bool:
        value = value.item()
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        _fail(TypeError, f"{name} ({meaning})", "a number", value)
    number = float(value)
    if not math.isfinite(number):
        _fail(ValueError, f"{name} ({meaning})", "a finite number", value)
    if minimum is not None and (number <= minimum if strict else number < minimum):
        _fail(ValueError, f"{name} ({meaning})", f"a number {'>' if strict else '>='} {minimum}", value)
    return number


def check_bool(name: str, value, meaning: str) -> bool:
    """Raise TypeError unless ``value`` is True or False (a string such as "False" would count as True)."""
    if not isinstance(value, (bool, np.bool_)):
        _fail(TypeError, f"{name} ({meaning})", "True or False", value)
    return bool(value)


def check_choice(name: str, value, choices: Sequence) -> None:
    """Raise ValueError unless ``value`` is one of ``choices``, suggesting the nearest one for a typo."""
    if not any(type(value) is type(c) and value == c for c in choices):
        close = difflib.get_close_matches(value, [c for c in choices if isinstance(c, str)], n=1) \
            if isinstance(value, str) else []  # fmt: skip
        _fail(ValueError, name, f"one of {tuple(choices)}", value, f"did you mean {close[0]!r}?" if close else "")


def check_ids(name: str, x, vocab_size: int, dims, shape_doc: str) -> None:
    """Raise unless ``x`` is an integer tensor of token ids, each in 0..vocab_size-1."""
    check_tensor(name, x, dims, shape_doc)
    if x.dtype == torch.bool or x.is_floating_point() or x.is_complex():
        _fail(TypeError, name, "token ids (an integer dtype such as torch.long)", x,
              "pass the ids from a vocabulary (Vocab.encode, make_batch), or convert with .long()",
              got=f"dtype {x.dtype}")  # fmt: skip
    low, high = int(x.min()), int(x.max())
    if low < 0 or high >= vocab_size:
        _fail(ValueError, name, f"token ids in 0..{vocab_size - 1} (a vocabulary of {vocab_size} words)", x,
              "encode with the vocabulary this model was built for", got=f"ids from {low} to {high}")  # fmt: skip


def check_instance(name: str, value, kind: type | tuple[type, ...], expected: str, fix: str = "") -> None:
    """Raise TypeError unless ``value`` is an instance of ``kind`` (described as ``expected``)."""
    if not isinstance(value, kind):
        _fail(TypeError, name, expected, value, fix)


def check_items(name: str, values, kind: type, expected: str, *, allow_empty: bool = False) -> list:
    """Return ``values`` as a list, raising unless it is a sequence (not a str, not one ``kind`` alone) of
    ``kind`` items, non-empty unless ``allow_empty``."""
    if isinstance(values, kind):
        _fail(TypeError, name, f"a list of {expected}", values, f"wrap a single one in a list: [{name}]")
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        _fail(TypeError, name, f"a list of {expected}", values)
    for n, item in enumerate(values):
        if not isinstance(item, kind):
            _fail(TypeError, f"{name}[{n}]", f"one of {expected}", item)
    if not allow_empty and len(values) == 0:
        _fail(ValueError, name, f"a non-empty list of {expected}", values)
    return list(values)


def check_list(name: str, values) -> list:
    """``values`` as a list, or TypeError unless a non-empty sequence (not a string)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
        raise TypeError(f"{name} should be a non-empty list, got {describe(values)}; wrap a single value in a list")
    return list(values)


def check_positive_ints(name: str, values, meaning: str) -> list[int]:
    """A non-empty list of positive whole numbers, or the error that names the first bad one."""
    values = check_items(name, values, int, f"positive ints ({meaning})")
    for i, value in enumerate(values):
        check_int(f"{name}[{i}]", value, meaning, minimum=1)
    return values
