"""The input checks of ``attnedu.attention``: one ``check_<function>`` per public function there, which the function
calls in its first line before its math, so that a caller's mistake is refused with a message that names the
argument (in the one form of ``attnedu._validate``). The package's own callers skip them through the unchecked
``_`` functions of ``attnedu.attention``.
"""

from __future__ import annotations

import torch

from ._validate import (
    check_bool,
    check_bool_mask,
    check_choice,
    check_finite,
    check_float,
    check_int,
    check_min_dims,
    check_positive_int,
    check_same_dtype,
    check_size,
    check_tensor,
)


def _check_query_keys(query, keys) -> None:
    check_tensor("query", query, (2, 3), "(batch, dec_dim) or (batch, tgt_len, dec_dim)")
    check_tensor("keys", keys, 3, "(batch, src_len, enc_dim)")
    check_size("keys", keys, 0, query.shape[0], "the batch size of query", "pass the same sentences to both")
    check_float("query", query)
    check_float("keys", keys)
    check_same_dtype(query=query, keys=keys)


def _check_weight(name: str, weight, dims: int, shape_doc: str, like: torch.Tensor) -> None:
    check_tensor(name, weight, dims, shape_doc)
    check_float(name, weight)
    check_same_dtype(**{"query": like, name: weight})


def _check_v_a(v_a, like: torch.Tensor) -> None:
    """v_a: (attn_dim,); a (1, attn_dim) or (attn_dim, 1) weight (an nn.Linear's) is read as the same vector."""
    check_tensor("v_a", v_a, (1, 2), "(attn_dim,)")
    check_float("v_a", v_a)
    if v_a.dim() == 2 and 1 not in v_a.shape:
        check_size("v_a", v_a, 0, 1, "v_a is one vector of attn_dim numbers", "pass a (attn_dim,) tensor")
    check_size("v_a", v_a.reshape(-1), 0, like.shape[-1], "attn_dim, the size of the projections")
    check_same_dtype(query=like, v_a=v_a)


def check_additive(query, keys, W_a, U_a, v_a) -> None:
    _check_query_keys(query, keys)
    _check_weight("W_a", W_a, 2, "(attn_dim, dec_dim)", query)
    _check_weight("U_a", U_a, 2, "(attn_dim, enc_dim)", query)
    check_size("W_a", W_a, 1, query.shape[-1], "dec_dim, the size of the decoder state", "W_a is (attn_dim, dec_dim)")
    check_size("U_a", U_a, 1, keys.shape[2], "enc_dim, the size of an annotation", "U_a is (attn_dim, enc_dim)")
    check_size("U_a", U_a, 0, W_a.shape[0], "attn_dim, the rows of W_a")
    _check_v_a(v_a, W_a[:, 0])


def check_dot(query, keys) -> None:
    _check_query_keys(query, keys)
    check_size(
        "keys", keys, 2, query.shape[-1], "dec_dim: the dot score compares the decoder state with each annotation",
        "use the general score (a W_a between them) when the sizes differ",
    )  # fmt: skip


def check_general(query, keys, W_a) -> None:
    _check_query_keys(query, keys)
    _check_weight("W_a", W_a, 2, "(dec_dim, enc_dim)", query)
    check_size("W_a", W_a, 0, query.shape[-1], "dec_dim", "W_a is (dec_dim, enc_dim): s^T W_a h")
    check_size("W_a", W_a, 1, keys.shape[2], "enc_dim", "W_a is (dec_dim, enc_dim): s^T W_a h")


def check_concat(query, keys, W_a, v_a) -> None:
    _check_query_keys(query, keys)
    _check_weight("W_a", W_a, 2, "(attn_dim, dec_dim + enc_dim)", query)
    check_size("W_a", W_a, 1, query.shape[-1] + keys.shape[2], "dec_dim + enc_dim, the size of [s; h_j]")
    _check_v_a(v_a, W_a[:, 0])


def check_location(query, W_a, src_len) -> int:
    check_tensor("query", query, (2, 3), "(batch, dec_dim) or (batch, tgt_len, dec_dim)")
    check_float("query", query)
    _check_weight("W_a", W_a, 2, "(max_src_len, dec_dim)", query)
    check_size("W_a", W_a, 1, query.shape[-1], "dec_dim", "W_a is (max_src_len, dec_dim)")
    src_len = check_positive_int("src_len", src_len, "the source length")
    if src_len > W_a.shape[0]:
        raise ValueError(
            f"src_len should be at most max_src_len={W_a.shape[0]}, the positions this location score has "
            f"weights for, got {src_len}; build it with max_src_len at least as long as the longest source"
        )
    return src_len


def check_local_p(scores, center, half_width) -> int:
    check_tensor("scores", scores, 2, "(batch, src_len)")
    check_float("scores", scores)
    check_tensor("center", center, 1, "(batch,)")
    if center.dtype == torch.bool:
        raise TypeError(f"center should be positions p_t (numbers), got dtype {center.dtype}; pass floats")
    check_size("center", center, 0, scores.shape[0], "one predicted position p_t per sentence")
    check_finite("center", center, "a NaN position would select no window and hide it as zero weights")
    half_width = check_int("half_width", half_width, "D, the window's half width", minimum=0)
    last = scores.shape[1] - 1
    if bool(((center < 0) | (center > last)).any()):
        raise ValueError(
            f"center should lie inside the source, 0 <= p_t <= src_len - 1 = {last}, got {center.tolist()}; a centre "
            "past the source selects a window with no position in it, and would give weights of zero without a "
            "word of warning. p_t = (S - 1) sigmoid(...) always lies inside"
        )
    return half_width


def check_local_p_sum(center, half_width, src_lengths) -> int:
    check_tensor("center", center, 1, "(batch,)")
    check_float("center", center)
    check_finite("center", center, "p_t is a position: a real number")
    half_width = check_int("half_width", half_width, "D, the window's half width", minimum=1)
    check_tensor("src_lengths", src_lengths, 1, "(batch,)")
    if src_lengths.is_floating_point() or src_lengths.dtype == torch.bool or bool((src_lengths < 1).any()):
        raise ValueError(f"src_lengths should be whole numbers >= 1 (words per source), got {src_lengths.tolist()}")
    check_size("src_lengths", src_lengths, 0, center.shape[0], "one source length per predicted position")
    if bool(((center < 0) | (center > src_lengths - 1)).any()):
        raise ValueError(
            f"center should lie inside each source, 0 <= p_t <= S - 1, got {center.tolist()} for lengths "
            f"{src_lengths.tolist()}; p_t = (S - 1) sigmoid(...) always does"
        )
    return half_width


def check_masked_softmax(scores, mask) -> None:
    check_min_dims("scores", scores, 1, "(..., src_len)")
    check_float("scores", scores)
    if mask is not None:
        _check_mask(mask, scores.shape)


def _check_mask(mask, score_shape) -> None:
    check_bool_mask("mask", mask)
    if mask.shape != score_shape:
        raise ValueError(
            f"mask should have the shape of the scores, {tuple(score_shape)}, got shape {tuple(mask.shape)}: "
            "they must match exactly (no broadcasting), one entry per score. For a padding mask of shape "
            "(batch, src_len) and scores (batch, tgt_len, src_len), pass mask[:, None, :].expand_as(scores)"
        )


def check_context(weights, values) -> None:
    check_tensor("weights", weights, (2, 3), "(batch, src_len) or (batch, tgt_len, src_len)")
    check_tensor("values", values, 3, "(batch, src_len, enc_dim)")
    check_float("weights", weights)
    check_float("values", values)
    check_same_dtype(weights=weights, values=values)
    if weights.shape[0] != values.shape[0] or weights.shape[-1] != values.shape[1]:
        raise ValueError(
            f"weights should be (batch, src_len) or (batch, tgt_len, src_len) with (batch, src_len) = "
            f"{tuple(values.shape[:2])} as in values, got shape {tuple(weights.shape)}: one weight per source "
            "position of the same sentences (a batch of one is not stretched to fit)"
        )


def check_sdpa(query, key, value, mask, is_causal, bias) -> None:
    for name, x, doc in (
        ("query", query, "(..., query_len, head_dim)"),
        ("key", key, "(..., key_len, head_dim)"),
        ("value", value, "(..., key_len, value_dim)"),
    ):
        check_min_dims(name, x, 2, doc)
        check_float(name, x)
    check_same_dtype(query=query, key=key, value=value)
    check_bool("is_causal", is_causal, "whether query i may only attend keys j <= i")
    if not (query.shape[:-2] == key.shape[:-2] == value.shape[:-2]):
        raise ValueError(
            f"query, key and value should share their leading (batch, heads, ...) dims, got {tuple(query.shape)}, "
            f"{tuple(key.shape)}, {tuple(value.shape)}; a batch of one is not stretched to fit"
        )
    check_size("key", key, -1, query.shape[-1], "head_dim of query: q . k needs equal sizes")
    check_size("value", value, -2, key.shape[-2], "key_len: one value per key")
    score_shape = torch.Size((*query.shape[:-1], key.shape[-2]))  # (..., query_len, key_len)
    if bias is not None:
        check_float("bias", bias)
        check_same_dtype(query=query, bias=bias)
        _check_broadcast("bias", bias, score_shape)
    if mask is not None:
        check_bool_mask("mask", mask)
        _check_broadcast("mask", mask, score_shape)


def _check_broadcast(name: str, x: torch.Tensor, score_shape: torch.Size) -> None:
    """One dim per score dim, each that size or 1: broadcasting only where the caller wrote a 1."""
    wanted = f"(..., query_len, key_len) = {tuple(score_shape)}, each dim that size or 1"
    if x.dim() != len(score_shape):
        raise ValueError(
            f"{name} has {x.dim()} dims but the scores have {len(score_shape)}: expected {wanted}. Leading "
            "dims are not added for you, because that silently pairs the wrong axes: a (batch, key_len) "
            f"padding mask for 4-D scores is {name}[:, None, None, :]"
        )
    for axis, (have, want) in enumerate(zip(x.shape, score_shape)):
        if have not in (1, want):
            raise ValueError(
                f"{name} has size {have} in dim {axis}, where the scores have {want}: expected {wanted}; "
                "a batch of one is not stretched to fit unless you write the 1"
            )


def check_score_std(input_std, weight_std, d_model, head_dim):
    d_model = check_positive_int("d_model", d_model, "the size of each input vector")
    head_dim = check_positive_int("head_dim", head_dim, "the size of each query and key")
    input_std, weight_std = torch.as_tensor(input_std), torch.as_tensor(weight_std)
    for name, std in (("input_std", input_std), ("weight_std", weight_std)):
        check_float(name, std)
        if bool((std < 0).any()):
            raise ValueError(f"{name} should be standard deviations (>= 0), got a negative value {std.min().item()}")
    return d_model, head_dim, input_std, weight_std


def check_query_scale(weight, competitors, head_dim):
    head_dim = check_positive_int("head_dim", head_dim, "the size of each query and key")
    weight = torch.as_tensor(weight, dtype=torch.get_default_dtype())
    if not bool(((weight > 0) & (weight < 1)).all()):
        raise ValueError(f"weight should be strictly between 0 and 1 (a softmax weight), got {weight.tolist()}")
    competitors = torch.as_tensor(competitors)
    if competitors.is_floating_point() or competitors.dtype == torch.bool or bool((competitors < 1).any()):
        raise ValueError(
            f"competitors should be counts of other keys, whole numbers >= 1, got {competitors.tolist()}; with no "
            "competing key the weight is 1 whatever the query"
        )
    return head_dim, weight, competitors


def check_project_keys(attention, keys) -> None:
    check_tensor("keys", keys, 3, "(batch, src_len, enc_dim)")
    check_float("keys", keys)
    check_size("keys", keys, 2, attention.enc_dim, "enc_dim this attention was built with")
    check_same_dtype(keys=keys, U_a=attention.U_a)


def check_additive_forward(attention, query, keys, mask, projected_keys) -> None:
    check_tensor("query", query, 2, "(batch, dec_dim)")
    check_float("query", query)
    check_size("query", query, 1, attention.dec_dim, "dec_dim this attention was built with")
    check_same_dtype(query=query, W_a=attention.W_a)
    check_tensor("keys", keys, 3, "(batch, src_len, enc_dim)")
    check_size("keys", keys, 0, query.shape[0], "the batch size of query", "a batch of one is not stretched")
    check_size("keys", keys, 2, attention.enc_dim, "enc_dim this attention was built with")
    if projected_keys is None:
        check_project_keys(attention, keys)
    else:
        check_tensor("projected_keys", projected_keys, 3, "(batch, src_len, attn_dim)")
        if projected_keys.shape != (*keys.shape[:2], attention.attn_dim):
            raise ValueError(
                f"projected_keys should have shape (batch, src_len, attn_dim) = "
                f"{(*keys.shape[:2], attention.attn_dim)}, got shape {tuple(projected_keys.shape)}; "
                "pass project_keys(keys) of the same sentences"
            )
    if mask is not None:
        _check_mask(mask, keys.shape[:2])  # the scores' shape: (batch, src_len)


def check_luong(score, dec_dim, enc_dim, attn_dim, max_src_len, scores: tuple) -> None:
    check_choice("score", score, scores)
    for name, value in (("dec_dim", dec_dim), ("enc_dim", enc_dim), ("attn_dim", attn_dim),
                        ("max_src_len", max_src_len)):  # fmt: skip
        check_positive_int(name, value, "a size")
    if score == "dot" and dec_dim != enc_dim:
        raise ValueError(
            f"enc_dim should equal dec_dim={dec_dim} for the dot score, got {enc_dim}: the dot score needs "
            "dec_dim == enc_dim; use 'general'"
        )


def check_luong_scores(attention, query, keys) -> None:
    _check_query_keys(query, keys)
    check_size("query", query, -1, attention.dec_dim, "dec_dim this attention was built with")
    check_size("keys", keys, 2, attention.enc_dim, "enc_dim this attention was built with")
    check_same_dtype(query=query, weights=next(attention.parameters(), query))
    if attention.score == "location" and keys.shape[1] > attention.W_a.shape[0]:
        check_location(query, attention.W_a, keys.shape[1])  # raises the error that says why


def check_luong_forward(attention, query, keys, mask) -> None:
    check_tensor("query", query, 3, "(batch, tgt_len, dec_dim)")
    check_luong_scores(attention, query, keys)
    if mask is not None:
        check_bool_mask("mask", mask)
        check_tensor("mask", mask, 2, "(batch, src_len)")
        if mask.shape != (keys.shape[0], keys.shape[1]):
            raise ValueError(
                f"mask should have shape (batch, src_len) = {tuple(keys.shape[:2])} as the keys, got shape "
                f"{tuple(mask.shape)}; build it with padding_mask(src_lengths, src_len)"
            )
