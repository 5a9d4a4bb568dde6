"""The input checks of ``attnedu.flash``: one ``check_<function>`` per public function there, which the function calls
in its first line before its math, so that a caller's mistake is refused with a message that names the argument (in
the one form of ``attnedu._validate``). ``check_qkv`` is shared with ``attnedu.triton_attention``.
"""

from __future__ import annotations

import torch

from ._validate import (
    check_bool,
    check_bool_mask,
    check_choice,
    check_float,
    check_int,
    check_min_dims,
    check_number,
    check_positive_int,
    describe,
)

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
SHAPE_DOC = "(batch, heads, seq_len, head_dim)"


def check_qkv(query, key, value) -> None:
    """Refuse, with a message that names the argument, inputs no attention function of this module can take."""
    for name, x in (("query", query), ("key", key), ("value", value)):
        check_min_dims(name, x, 2, SHAPE_DOC)
        check_float(name, x)
        if x.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{name} has dtype {x.dtype}; use one of float32, bfloat16, float16, float64")
    if not (query.dtype == key.dtype == value.dtype):
        raise TypeError(
            f"query, key and value must share one dtype, got {query.dtype}, {key.dtype}, {value.dtype}; "
            "convert with .to(query.dtype)"
        )
    if not (query.device == key.device == value.device):
        devices = f"{query.device}, {key.device}, {value.device}"
        raise ValueError(f"query, key and value must be on one device, got {devices}; move them with .to(query.device)")
    if not (query.dim() == key.dim() == value.dim()) or not (query.shape[:-2] == key.shape[:-2] == value.shape[:-2]):
        raise ValueError(
            f"query, key and value must share their leading dimensions (batch, heads), got query {describe(query)}, "
            f"key {describe(key)}, value {describe(value)}; nothing is broadcast: expand or repeat them first"
        )
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query and key must have the same head_dim (last dimension) to be multiplied, got {query.shape[-1]} and "
            f"{key.shape[-1]}; did you pass (batch, seq_len, heads, head_dim)? Transpose to {SHAPE_DOC}"
        )
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key and value must have the same key_len (dimension -2), got {key.shape[-2]} and {value.shape[-2]}: "
            "every key needs its value"
        )
    if min(query.shape[-2], key.shape[-2]) == 0:
        raise ValueError(f"query_len and key_len must be at least 1, got {query.shape[-2]} and {key.shape[-2]}")


def check_naive_attention(query, key, value, is_causal) -> None:
    check_qkv(query, key, value)
    check_bool("is_causal", is_causal, "whether query i may only attend keys j <= i")


def check_online_softmax(scores, block_size) -> None:
    if not isinstance(scores, torch.Tensor):
        raise TypeError(f"scores must be a torch.Tensor, got {describe(scores)}")
    check_float("scores", scores)
    check_positive_int("block_size", block_size, "how many scores to read at a time")
    if scores.dim() == 0 or scores.shape[-1] == 0:
        raise ValueError(f"scores need a last dimension of length at least 1, got {describe(scores)}")


def _block_sizes(block_q, block_k) -> tuple[int, int]:
    check_positive_int("block_q", block_q, "queries per tile")
    check_positive_int("block_k", block_k, "keys per tile")
    return block_q, block_k


def check_causal_tiles(query_len, block_q, block_k, key_len) -> int:
    """Returns key_len (query_len when None)."""
    check_positive_int("query_len", query_len, "the number of queries")
    key_len = query_len if key_len is None else check_positive_int("key_len", key_len, "the number of keys")
    _block_sizes(block_q, block_k)
    return key_len


def check_block_update(m, l, acc, q_block, k_block, v_block, allowed, scale) -> float | None:
    """Returns scale as a float (None stays None: 1/sqrt(head_dim))."""
    for name, x, dims in (
        ("m", m, "(..., block_q)"), ("l", l, "(..., block_q)"), ("acc", acc, "(..., block_q, value_dim)"),
        ("q_block", q_block, "(..., block_q, head_dim)"), ("k_block", k_block, "(..., block_k, head_dim)"),
        ("v_block", v_block, "(..., block_k, value_dim)"),
    ):  # fmt: skip
        check_min_dims(name, x, 1 if name in ("m", "l") else 2, dims)
        check_float(name, x)
    block_k = k_block.shape[-2]
    if k_block.shape[-1] != q_block.shape[-1] or v_block.shape[-2] != block_k:
        raise ValueError(
            f"k_block should be (..., block_k, head_dim) with q_block's head_dim and v_block (..., block_k, "
            f"value_dim) with k_block's block_k, got q_block {describe(q_block)}, k_block {describe(k_block)}, "
            f"v_block {describe(v_block)}"
        )
    if m.shape != q_block.shape[:-1] or l.shape != m.shape or acc.shape != (*m.shape, v_block.shape[-1]):
        raise ValueError(
            f"m and l should be (..., block_q) = {tuple(q_block.shape[:-1])} and acc (..., block_q, value_dim) = "
            f"{(*q_block.shape[:-1], v_block.shape[-1])}, one running state per query, got m {describe(m)}, "
            f"l {describe(l)}, acc {describe(acc)}"
        )
    if allowed is not None:
        check_bool_mask("allowed", allowed)
        try:
            torch.broadcast_shapes(allowed.shape, (*q_block.shape[:-1], block_k))
        except RuntimeError:
            raise ValueError(
                f"allowed should broadcast to the tile's scores (..., block_q, block_k) = "
                f"{(*q_block.shape[:-1], block_k)}, e.g. (block_k,) or (block_q, block_k), got {describe(allowed)}"
            ) from None
    return _scale(scale)


def check_tiled_attention(query, key, value, is_causal, block_q, block_k) -> tuple[int, int]:
    check_qkv(query, key, value)
    check_bool("is_causal", is_causal, "whether query i may only attend keys j <= i")
    return _block_sizes(block_q, block_k)


def check_tiled_attention_backward(query, key, value, out, lse, grad_out, is_causal, block_q, block_k, order,
                                   orders: tuple[str, ...]) -> tuple[int, int]:  # fmt: skip
    check_qkv(query, key, value)
    check_choice("order", order, orders)
    check_bool("is_causal", is_causal, "whether query i may only attend keys j <= i")
    expected = (*query.shape[:-1], value.shape[-1])
    for name, x, shape in (("out", out, expected), ("lse", lse, expected[:-1]), ("grad_out", grad_out, expected)):
        if not isinstance(x, torch.Tensor) or tuple(x.shape) != shape or not x.is_floating_point():
            raise ValueError(
                f"{name} should be a float tensor of shape {shape}, what tiled_attention_forward returns for these "
                f"inputs (and the gradient of its output), got {describe(x)}"
            )
    return _block_sizes(block_q, block_k)


def check_attention_flops(batch, heads, n_q, n_k, head_dim, causal) -> None:
    for name, value in (("batch", batch), ("heads", heads), ("n_q", n_q), ("n_k", n_k), ("head_dim", head_dim)):
        check_positive_int(name, value, "a size")
    check_bool("causal", causal, "whether only the pairs j <= i are counted")


def check_scores_bytes(batch, heads, n_q, n_k, bytes_per_number) -> None:
    for name, value in (("batch", batch), ("heads", heads), ("n_q", n_q), ("n_k", n_k)):
        check_positive_int(name, value, "a size")
    check_positive_int("bytes_per_number", bytes_per_number, "2 for bfloat16/float16, 4 for float32")


def _state_shapes(prefix: str, m, l, o, out: str = "o") -> None:
    """A softmax state: m (...,), l (...,) and the unnormalised output (..., value_dim), named m1, l1, o1 etc."""
    names = (f"m{prefix}", f"l{prefix}", f"{out}{prefix}")
    for name, x, dims in zip(names, (m, l, o), ("(...,)", "(...,)", "(..., value_dim)"), strict=True):
        check_min_dims(name, x, 2 if name == names[2] else 1, dims)
        check_float(name, x)
    if l.shape != m.shape or o.shape[:-1] != m.shape:
        got = ", ".join(f"{name} {describe(x)}" for name, x in zip(names, (m, l, o), strict=True))
        raise ValueError(
            f"a softmax state is m (...,), l (...,) and {out} (..., value_dim): one m and one l per query, one row of "
            f"output per query; got {got}"
        )


def check_merge_softmax_states(m1, l1, o1, m2, l2, o2) -> None:
    _state_shapes("1", m1, l1, o1)
    _state_shapes("2", m2, l2, o2)
    if m1.shape != m2.shape or o1.shape != o2.shape:
        raise ValueError(
            f"the two states must be of the same queries: m1 {describe(m1)} and m2 {describe(m2)}, o1 {describe(o1)} "
            f"and o2 {describe(o2)} should have equal shapes"
        )


def _scale(scale) -> float | None:
    """The factor of the scores as a float; None (the default, 1/sqrt(head_dim)) stays None."""
    return None if scale is None else check_number("scale", scale, "the factor of the scores", 0.0, strict=True)


def _check_tile(q_block, k_block, v_block) -> None:
    for name, x, dims in (("q_block", q_block, "(..., block_q, head_dim)"), ("k_block", k_block,
                          "(..., block_k, head_dim)"), ("v_block", v_block, "(..., block_k, value_dim)")):  # fmt: skip
        check_min_dims(name, x, 2, dims)
        check_float(name, x)
    if k_block.shape[-1] != q_block.shape[-1] or v_block.shape[-2] != k_block.shape[-2]:
        raise ValueError(
            f"k_block should be (..., block_k, head_dim) with q_block's head_dim and v_block (..., block_k, "
            f"value_dim) with k_block's block_k, got q_block {describe(q_block)}, k_block {describe(k_block)}, "
            f"v_block {describe(v_block)}"
        )


def check_causal_block_update(m, l, acc, q_block, k_block, v_block, q_start, k_start, scale):
    """Returns q_start and k_start as ints, the scale as a float (None stays None)."""
    _check_tile(q_block, k_block, v_block)
    _state_shapes("", m, l, acc, "acc")
    if m.shape != q_block.shape[:-1] or acc.shape[-1] != v_block.shape[-1]:
        raise ValueError(
            f"m and l should be (..., block_q) = {tuple(q_block.shape[:-1])} and acc (..., block_q, value_dim) = "
            f"{(*q_block.shape[:-1], v_block.shape[-1])}, got m {describe(m)}, acc {describe(acc)}"
        )
    q_start = check_int("q_start", q_start, "the position of the tile's first query", minimum=0)
    k_start = check_int("k_start", k_start, "the position of the tile's first key", minimum=0)
    return q_start, k_start, _scale(scale)


def check_tile_backward(q_block, k_block, v_block, do_block, lse, D, scale) -> float | None:
    """Returns the scale as a float (None stays None)."""
    _check_tile(q_block, k_block, v_block)
    check_min_dims("do_block", do_block, 2, "(..., block_q, value_dim)")
    check_float("do_block", do_block)
    if do_block.shape != (*q_block.shape[:-1], v_block.shape[-1]):
        raise ValueError(
            f"do_block should be the gradient of the tile's output, (..., block_q, value_dim) = "
            f"{(*q_block.shape[:-1], v_block.shape[-1])}, got {describe(do_block)}"
        )
    for name, x in (("lse", lse), ("D", D)):
        check_float(name, x)
        if x.shape != q_block.shape[:-1]:
            raise ValueError(f"{name} should be one number per query, (..., block_q) = {tuple(q_block.shape[:-1])}, "
                             f"got {describe(x)}")  # fmt: skip
    return _scale(scale)
