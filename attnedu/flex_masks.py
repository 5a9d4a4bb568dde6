"""The mask ladder as FlexAttention functions (lesson 10): lesson 06's masks written as ``mask_mod`` functions of
(b, h, q_idx, kv_idx) (``torch.nn.attention.flex_attention``), each equal to ``attnedu.masks``', and what a BlockMask
records of them.

    causal_mod, sliding_window_mod(window), document_mod(ids), prefix_lm_mod(prefix_lengths), alibi_score_mod(slopes)
    flex_attention_cpu(q, k, v, mask_mod, score_mod)   eager FlexAttention on the CPU, with clear errors where the
                          pinned torch stops (no backward on the CPU)
    mask_from_mod(mask_mod, batch, heads, length)   the dense mask a mask_mod describes
    block_map(mask_mod, length, block_size)   which blocks of the score matrix a BlockMask skips, computes in full or
                          computes with the mask_mod applied

Each public function checks its arguments in one call (the checks are at the end of this module), then the math.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable

import torch

from ._validate import check_float, check_int, check_positive_int, check_tensor, describe
from ._validate_kv_cache import check_heads


def causal_mod(b, h, q_idx, kv_idx):
    """mask_mod of ``attnedu.masks.causal_mask``: key j at or before query i."""
    return q_idx >= kv_idx


def sliding_window_mod(window: int) -> Callable:
    """mask_mod of ``masks.sliding_window_mask(length, window, causal=True)``: 0 <= i - j <= window."""
    window = check_int("window", window, "how many earlier neighbours", minimum=0)

    def mod(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx <= window)

    return mod


def document_mod(document_ids: torch.Tensor) -> Callable:
    """mask_mod of ``masks.document_mask(document_ids)``: same document and causal. The mod indexes
    ``document_ids`` (batch, length), so it serves inputs of that batch and length only (``flex_attention_cpu`` and
    ``mask_from_mod`` check it)."""
    _check_document_mod(document_ids)

    def mod(b, h, q_idx, kv_idx):
        return (document_ids[b, q_idx] == document_ids[b, kv_idx]) & (q_idx >= kv_idx)

    mod.sizes = {"batch": document_ids.shape[0], "length": document_ids.shape[1], "name": "document_ids"}
    return mod


def prefix_lm_mod(prefix_lengths: torch.Tensor) -> Callable:
    """mask_mod of ``masks.prefix_lm_mask(prefix_lengths, lengths, length)`` without padding: causal, or key in the
    prefix (read both ways). Serves inputs of batch ``len(prefix_lengths)``."""
    _check_prefix_lm_mod(prefix_lengths)

    def mod(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) | (kv_idx < prefix_lengths[b])

    mod.sizes = {"batch": prefix_lengths.shape[0], "name": "prefix_lengths"}
    return mod


def alibi_score_mod(slopes: torch.Tensor) -> Callable:
    """score_mod of ALiBi (``positional.alibi_bias``): score - slope_h * (i - j). Serves ``len(slopes)`` heads."""
    _check_alibi_score_mod(slopes)

    def mod(score, b, h, q_idx, kv_idx):
        return score - slopes[h] * (q_idx - kv_idx)

    mod.sizes = {"heads": slopes.shape[0], "name": "slopes"}
    return mod


def flex_attention_cpu(q, k, v, mask_mod: Callable | None = None, score_mod: Callable | None = None):
    """``torch.nn.attention.flex_attention.flex_attention`` in eager mode: q, k, v (B, H, N, d) -> (B, H, N, d); the
    mask from ``mask_mod(b, h, q_idx, kv_idx) -> bool`` (through ``create_block_mask``), the scores changed by
    ``score_mod(score, b, h, q_idx, kv_idx)``. Eager FlexAttention builds the whole score matrix (no fused kernel:
    that needs torch.compile, and only the compiled kernel skips the blocks its BlockMask marks empty), which is what
    a lesson-sized check needs.

    Where torch 2.13's CPU support stops, this says so instead of crashing deep inside torch (measured): no backward
    on the CPU (inputs that require grad are refused), and a device other than the CPU is refused on a machine
    without CUDA."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    _check_flex_attention_cpu(q, k, v, mask_mod, score_mod)
    batch, heads, n, _ = q.shape
    try:
        block_mask = None
        if mask_mod is not None:
            block_mask = create_block_mask(mask_mod, batch, heads, n, n, device=q.device.type)
        with warnings.catch_warnings():  # "called without torch.compile()": eager on purpose, see the docstring
            warnings.simplefilter("ignore")
            return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)
    except IndexError as error:
        raise ValueError(f"mask_mod and score_mod should index only within the tensors they read for inputs of batch "
                         f"{batch}, {heads} heads and length {n}, got: {error}") from error  # fmt: skip


def mask_from_mod(mask_mod: Callable, batch: int, heads: int, length: int) -> torch.Tensor:
    """The dense (B, H, N, N) bool mask a mask_mod describes (``create_mask``), to compare with attnedu.masks'."""
    from torch.nn.attention.flex_attention import create_mask

    _check_mask_from_mod(mask_mod, batch, heads, length)
    try:
        return create_mask(mask_mod, batch, heads, length, length, device="cpu")
    except IndexError as error:
        raise ValueError(f"mask_mod should index only within the tensors it reads for batch {batch}, {heads} heads "
                         f"and length {length}, got: {error}") from error  # fmt: skip


EMPTY_BLOCK, PARTIAL_BLOCK, FULL_BLOCK = 0, 1, 2


def block_map(mask_mod: Callable, length: int, block_size: int = 128, batch: int = 0) -> torch.Tensor:
    """What FlexAttention's BlockMask (``create_block_mask``) records for a mask_mod: the score matrix of sequence
    ``batch`` (length x length, head 0) cut into blocks of block_size x block_size, each one

        EMPTY_BLOCK (0)    every entry masked: the compiled kernel skips it, no score computed
        PARTIAL_BLOCK (1)  some entries masked: computed, with mask_mod applied entry by entry
        FULL_BLOCK (2)     no entry masked: computed, mask_mod never called

    -> (blocks, blocks) long, blocks = ceil(length / block_size), row by row the blocks of ``kv_num_blocks``
    (PARTIAL) and ``full_kv_num_blocks`` (FULL). The share of EMPTY_BLOCK entries is the share of blocks the compiled
    kernel skips. It equals ``BlockMask.sparsity()`` / 100 only when length is a multiple of block_size: torch counts
    every computed block as block_size^2 scores, against length^2 in all, so with a last block cut short it reports
    less (at length 130 in blocks of 128, a negative number)."""
    from torch.nn.attention.flex_attention import create_block_mask

    length, block_size, batch, sizes = _check_block_map(mask_mod, length, block_size, batch)
    try:
        mask = create_block_mask(mask_mod, sizes.get("batch", batch + 1), 1, length, length, device="cpu",
                                 BLOCK_SIZE=block_size)  # fmt: skip
    except IndexError as error:
        raise ValueError(f"mask_mod should index only within the tensors it reads for length {length}, got: "
                         f"{error}") from error  # fmt: skip
    blocks = -(-length // block_size)
    out = torch.zeros(blocks, blocks, dtype=torch.long)
    for indices, counts, kind in ((mask.kv_indices, mask.kv_num_blocks, PARTIAL_BLOCK),
                                  (mask.full_kv_indices, mask.full_kv_num_blocks, FULL_BLOCK)):  # fmt: skip
        if indices is None:
            continue
        for row in range(blocks):
            out[row, indices[batch, 0, row, : counts[batch, 0, row]]] = kind
    return out


# --------------------------------------------------------------------------------------------
# Input checks (each public function above calls its own first; one form of message: attnedu._validate)
# --------------------------------------------------------------------------------------------


def _check_integers(name: str, x, minimum: int | None = None) -> None:
    if x.dtype == torch.bool or x.is_floating_point() or x.is_complex():
        raise TypeError(f"{name} should hold integers (torch.long), got dtype {x.dtype}")
    if minimum is not None and int(x.min()) < minimum:
        raise ValueError(f"{name} should be at least {minimum}, got {x.tolist()}")


def _check_document_mod(document_ids) -> None:
    check_tensor("document_ids", document_ids, 2, "(batch, length)")
    _check_integers("document_ids", document_ids)


def _check_prefix_lm_mod(prefix_lengths) -> None:
    check_tensor("prefix_lengths", prefix_lengths, 1, "(batch,)")
    _check_integers("prefix_lengths", prefix_lengths, minimum=0)


def _check_alibi_score_mod(slopes) -> None:
    check_tensor("slopes", slopes, 1, "(num_heads,)")
    check_float("slopes", slopes)


def _check_mod(name: str, fn, arity: int, batch: int, heads: int, length: int) -> None:
    """``fn`` a function of ``arity`` positional arguments; one of the course's mods built for these sizes."""
    if fn is None:
        return
    signature = "(b, h, q_idx, kv_idx) -> bool" if arity == 4 else "(score, b, h, q_idx, kv_idx) -> score"
    if not callable(fn):
        raise TypeError(f"{name} should be a function {signature}, got {describe(fn)}")
    try:
        inspect.signature(fn).bind(*range(arity))
    except TypeError:
        raise TypeError(f"{name} should take {arity} arguments {signature}, got a function with signature "
                        f"{inspect.signature(fn)}") from None  # fmt: skip
    except ValueError:  # a builtin without a signature: let torch try it
        pass
    sizes = getattr(fn, "sizes", {})
    for key, value in (("batch", batch), ("heads", heads), ("length", length)):
        if key in sizes and sizes[key] != value:
            raise ValueError(f"{name} should serve inputs of {key} {value}, got one built from {sizes['name']} "
                             f"for {key} {sizes[key]}; build it from {sizes['name']} that match the "
                             "inputs")  # fmt: skip


def _check_flex_attention_cpu(q, k, v, mask_mod, score_mod) -> None:
    check_heads(q, k, v)
    if q.shape[1] != k.shape[1] or q.shape[2] != k.shape[2]:
        raise ValueError(f"q and k should have the same heads and length here, got q {describe(q)}, k {describe(k)}")
    if q.device.type == "cuda" and not torch.cuda.is_available():  # pragma: no cover - a CUDA tensor implies CUDA
        raise RuntimeError("q is on a CUDA device, but this machine has no CUDA")
    if q.device.type == "cpu" and any(t.requires_grad for t in (q, k, v)):
        raise NotImplementedError(
            "q, k, v should not require grad on the CPU: FlexAttention in torch 2.13 has no backward on the CPU "
            "(torch raises 'FlexAttention does not support backward on CPU'); for training on the CPU use "
            "attnedu.attention.scaled_dot_product_attention with an explicit mask from attnedu.masks"
        )
    batch, heads, n, _ = q.shape
    _check_mod("mask_mod", mask_mod, 4, batch, heads, n)
    _check_mod("score_mod", score_mod, 5, batch, heads, n)


def _check_mask_from_mod(mask_mod, batch, heads, length) -> None:
    for name, value in (("batch", batch), ("heads", heads), ("length", length)):
        check_positive_int(name, value, "a size")
    if mask_mod is None:
        raise TypeError("mask_mod should be a function (b, h, q_idx, kv_idx) -> bool, got None")
    _check_mod("mask_mod", mask_mod, 4, batch, heads, length)


def _check_block_map(mask_mod, length, block_size, batch) -> tuple:
    """-> length, block_size, batch (the sequence shown), and the sizes the mod was built for."""
    length = check_positive_int("length", length, "queries and keys")
    block_size = check_positive_int("block_size", block_size, "rows and columns of a block")
    sizes = getattr(mask_mod, "sizes", {})
    batch = check_int("batch", batch, "the sequence to show", minimum=0, maximum=sizes.get("batch", batch + 1) - 1)
    _check_mod("mask_mod", mask_mod, 4, sizes.get("batch", batch + 1), 1, length)
    return length, block_size, batch, sizes
