"""Attention: scores, masked softmax, context, and the attention modules of lessons 02-05.

Encoder-decoder attention (lessons 02-03), for decoder state(s) ``query`` and encoder annotations
``keys`` h_j (Bahdanau et al. 2015, Sec. 3.1 and Appendix A.1.2; Luong et al. 2015, Sec. 3.1):

    additive (Bahdanau)  e_j = v_a^T tanh(W_a s + U_a h_j)
    dot      (Luong)     e_j = s^T h_j
    general  (Luong)     e_j = s^T W_a h_j
    concat   (Luong)     e_j = v_a^T tanh(W_a [s; h_j])
    location (Luong)     e   = W_a s              (one score per position; never looks at h_j)

    alpha_j = exp(e_j) / sum_k exp(e_k)          softmax over source positions (masked ones get 0)
    c       = sum_j alpha_j h_j                  context vector

Scaled dot-product attention (lesson 04, Vaswani et al. 2017, Sec. 3.2.1):

    Attention(Q, K, V) = softmax(Q K^T / sqrt(head_dim)) V

One mask convention everywhere: a boolean mask is True where attention *may* look, as in
``torch.nn.functional.scaled_dot_product_attention``. A row with nothing to look at gets all-zero
weights (and a zero output), never NaN; a NaN or infinity in the scores is never hidden.
Multi-head attention (lesson 05) is in ``attnedu.multihead``, which builds on this module.
"""

from __future__ import annotations

import math

import torch
from torch import nn

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
from .masks import causal_mask

# --------------------------------------------------------------------------------------------
# Scores of encoder-decoder attention (lessons 02-03). query: (batch, dec_dim) for one decoder
# step, or (batch, tgt_len, dec_dim) for every step at once; keys: (batch, src_len, enc_dim).
# Each returns (batch, src_len) or (batch, tgt_len, src_len) to match the query.
# --------------------------------------------------------------------------------------------


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


def _as_steps(query: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """(batch, dec_dim) -> (batch, 1, dec_dim), remembering to squeeze the step axis back out."""
    return (query[:, None, :], True) if query.dim() == 2 else (query, False)


def additive_score(
    query: torch.Tensor, keys: torch.Tensor, W_a: torch.Tensor, U_a: torch.Tensor, v_a: torch.Tensor
) -> torch.Tensor:
    """Bahdanau: e_j = v_a^T tanh(W_a s + U_a h_j) for every source position j.

    query: (batch, dec_dim) the previous decoder state s_{t-1} (or (batch, tgt_len, dec_dim))
    keys:  (batch, src_len, enc_dim)   the encoder annotations h_j
    W_a: (attn_dim, dec_dim); U_a: (attn_dim, enc_dim); v_a: (attn_dim,)
    returns scores: (batch, src_len) (or (batch, tgt_len, src_len))
    """
    _check_query_keys(query, keys)
    _check_weight("W_a", W_a, 2, "(attn_dim, dec_dim)", query)
    _check_weight("U_a", U_a, 2, "(attn_dim, enc_dim)", query)
    check_size("W_a", W_a, 1, query.shape[-1], "dec_dim, the size of the decoder state", "W_a is (attn_dim, dec_dim)")
    check_size("U_a", U_a, 1, keys.shape[2], "enc_dim, the size of an annotation", "U_a is (attn_dim, enc_dim)")
    check_size("U_a", U_a, 0, W_a.shape[0], "attn_dim, the rows of W_a")
    _check_v_a(v_a, W_a[:, 0])
    return _additive(query @ W_a.T, keys @ U_a.T, v_a)


def _additive(projected_query: torch.Tensor, projected_keys: torch.Tensor, v_a: torch.Tensor) -> torch.Tensor:
    """v_a^T tanh(W_a s + U_a h_j) from the projections, inputs already checked."""
    steps, single = _as_steps(projected_query)
    scores = torch.tanh(steps[:, :, None, :] + projected_keys[:, None, :, :]) @ v_a.reshape(-1)
    return scores[:, 0] if single else scores


def _check_v_a(v_a, like: torch.Tensor) -> None:
    """v_a: (attn_dim,); a (1, attn_dim) or (attn_dim, 1) weight (an nn.Linear's) is read as the same vector."""
    check_tensor("v_a", v_a, (1, 2), "(attn_dim,)")
    check_float("v_a", v_a)
    if v_a.dim() == 2 and 1 not in v_a.shape:
        check_size("v_a", v_a, 0, 1, "v_a is one vector of attn_dim numbers", "pass a (attn_dim,) tensor")
    check_size("v_a", v_a.reshape(-1), 0, like.shape[-1], "attn_dim, the size of the projections")
    check_same_dtype(query=like, v_a=v_a)


def dot_score(query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Luong dot: e_j = s^T h_j. Needs dec_dim == enc_dim. Shapes as for additive_score."""
    _check_query_keys(query, keys)
    check_size(
        "keys", keys, 2, query.shape[-1], "dec_dim: the dot score compares the decoder state with each annotation",
        "use the general score (a W_a between them) when the sizes differ",
    )  # fmt: skip
    return _dot(query, keys)


def _dot(query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    steps, single = _as_steps(query)
    scores = steps @ keys.transpose(1, 2)  # (batch, tgt_len, src_len)
    return scores[:, 0] if single else scores


def general_score(query: torch.Tensor, keys: torch.Tensor, W_a: torch.Tensor) -> torch.Tensor:
    """Luong general: e_j = s^T W_a h_j, W_a: (dec_dim, enc_dim). Shapes as for additive_score."""
    _check_query_keys(query, keys)
    _check_weight("W_a", W_a, 2, "(dec_dim, enc_dim)", query)
    check_size("W_a", W_a, 0, query.shape[-1], "dec_dim", "W_a is (dec_dim, enc_dim): s^T W_a h")
    check_size("W_a", W_a, 1, keys.shape[2], "enc_dim", "W_a is (dec_dim, enc_dim): s^T W_a h")
    return _general(query, keys, W_a)


def _general(query: torch.Tensor, keys: torch.Tensor, W_a: torch.Tensor) -> torch.Tensor:
    steps, single = _as_steps(query)
    scores = (steps @ W_a) @ keys.transpose(1, 2)
    return scores[:, 0] if single else scores


def concat_score(query: torch.Tensor, keys: torch.Tensor, W_a: torch.Tensor, v_a: torch.Tensor) -> torch.Tensor:
    """Luong concat: e_j = v_a^T tanh(W_a [s; h_j]), W_a: (attn_dim, dec_dim + enc_dim).

    Splitting W_a into the columns that meet s and those that meet h_j shows it is Bahdanau's
    additive score with W_a = W_a[:, :dec_dim] and U_a = W_a[:, dec_dim:]. Shapes as for additive_score.
    """
    _check_query_keys(query, keys)
    _check_weight("W_a", W_a, 2, "(attn_dim, dec_dim + enc_dim)", query)
    dec_dim = query.shape[-1]
    check_size("W_a", W_a, 1, dec_dim + keys.shape[2], "dec_dim + enc_dim, the size of [s; h_j]")
    _check_v_a(v_a, W_a[:, 0])
    return _concat(query, keys, W_a, v_a)


def _concat(query: torch.Tensor, keys: torch.Tensor, W_a: torch.Tensor, v_a: torch.Tensor) -> torch.Tensor:
    dec_dim = query.shape[-1]
    return _additive(query @ W_a[:, :dec_dim].T, keys @ W_a[:, dec_dim:].T, v_a)


def location_score(query: torch.Tensor, W_a: torch.Tensor, src_len: int) -> torch.Tensor:
    """Luong location: e = W_a s, one score per source position, computed from the decoder state alone.

    W_a: (max_src_len, dec_dim). Returns the first ``src_len`` scores: (batch, src_len) or
    (batch, tgt_len, src_len). It never looks at the source words, only at where they are.
    """
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
    return (query @ W_a.T)[..., :src_len]


def local_p_weights(scores: torch.Tensor, center: torch.Tensor, half_width: int) -> torch.Tensor:
    """Luong et al.'s local-p attention for one decoder step (Sec. 3.2, Eq. 10):

        a_t(j) = align(s_t, h_j) * exp(-(j - p_t)^2 / (2 sigma^2)),   sigma = D / 2,

    where align is the softmax of the scores over the window of 2D + 1 positions j with
    |j - round(p_t)| <= D only, and p_t (the predicted aligned position, a real number) is given: the model
    computes it as p_t = (S - 1) * sigmoid(v_p^T tanh(W_p s_t)) for a source of S words (Luong et al. write
    S * sigmoid with positions from 1; from 0, S - 1 keeps p_t inside the source). The window is centred on
    the nearest position, round(p_t) (halves round up), so it holds exactly 2D + 1 positions, fewer only where
    it meets an end of the source; the Gaussian is centred on p_t itself. Positions count from 0.
    scores: (batch, src_len); center: (batch,) floats p_t, each in [0, src_len - 1]; half_width: D. Returns (batch,
    src_len), zero outside the window; a row does not sum to one (the Gaussian shrinks it), as in the paper.
    """
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
    positions = torch.arange(scores.shape[1], dtype=scores.dtype, device=scores.device)[None, :]
    p = center.to(scores.dtype)[:, None]
    window = (positions - torch.floor(p + 0.5)).abs() <= half_width  # the 2D + 1 positions nearest round(p_t)
    sigma = max(half_width, 1e-6) / 2
    return masked_softmax(scores, window) * torch.exp(-((positions - p) ** 2) / (2 * sigma**2))


def local_p_uniform_sum(center: torch.Tensor, half_width: int, src_lengths: torch.Tensor) -> torch.Tensor:
    """The sum of a local-p row's weights (``local_p_weights``) when every score in its window is equal (lesson 03's
    prediction exercise): the softmax then gives each of the window's n positions 1 / n, so the sum is the mean of
    the Gaussian over them,

        sum_j a_t(j) = (1 / n) sum_{j in window} exp(-(j - p_t)^2 / (2 sigma^2)),   sigma = D / 2,

    with the window the positions j of the source, 0 <= j <= S - 1, with |j - round(p_t)| <= D (halves round up):
    2D + 1 of them, fewer where the window meets an end of the source.
    center: (batch,) floats p_t, each in [0, S - 1]; half_width: D >= 1; src_lengths: (batch,) source lengths S >= 1.
    Returns (batch,) floats in (0, 1].
    """
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
    longest = int(src_lengths.max())
    positions = torch.arange(longest, dtype=center.dtype)[None, :]
    p = center[:, None]
    window = ((positions - torch.floor(p + 0.5)).abs() <= half_width) & (positions < src_lengths[:, None])
    gaussian = torch.exp(-((positions - p) ** 2) / (2 * (half_width / 2) ** 2))
    return (gaussian * window).sum(dim=-1) / window.sum(dim=-1)


# --------------------------------------------------------------------------------------------
# Softmax, context, scaled dot-product attention
# --------------------------------------------------------------------------------------------


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the last axis, with masked positions at exactly zero.

    scores: (..., src_len) floats; mask: bool of exactly the same shape, True = may attend (or None).
    A row with no position allowed gives all zeros, not NaN. A NaN or infinite score at an allowed
    position is not hidden: it makes the row NaN, as it would without a mask.
    """
    check_min_dims("scores", scores, 1, "(..., src_len)")
    check_float("scores", scores)
    if mask is None:
        return torch.softmax(scores, dim=-1)
    _check_mask(mask, scores.shape)
    return _masked_softmax(scores, mask)


def _check_mask(mask, score_shape) -> None:
    check_bool_mask("mask", mask)
    if mask.shape != score_shape:
        raise ValueError(
            f"mask should have the shape of the scores, {tuple(score_shape)}, got shape {tuple(mask.shape)}: "
            "they must match exactly (no broadcasting), one entry per score. For a padding mask of shape "
            "(batch, src_len) and scores (batch, tgt_len, src_len), pass mask[:, None, :].expand_as(scores)"
        )


def _masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """masked_softmax for a mask already checked: bool, the scores' shape (or broadcastable to it)."""
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    nothing_to_attend = ~mask.any(dim=-1, keepdim=True)
    return weights.masked_fill(nothing_to_attend, 0.0)  # softmax of an all -inf row is 0/0 = NaN


def context_vector(weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """c = sum_j alpha_j h_j.

    weights (batch, src_len) -> (batch, enc_dim); or weights (batch, tgt_len, src_len) -> (batch, tgt_len, enc_dim).
    values: (batch, src_len, enc_dim).
    """
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
    return _context(weights, values)


def _context(weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    if weights.dim() == 2:
        return (weights[:, :, None] * values).sum(dim=1)
    return weights @ values


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    is_causal: bool = False,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T / sqrt(head_dim) + bias) V, returning the weights too.

    query: (..., query_len, head_dim); key: (..., key_len, head_dim); value: (..., key_len, value_dim),
    with the same leading dims (e.g. (batch, heads)).
    mask:  bool, True = may attend, with one dim per score dim (..., query_len, key_len); each dim either
           that size or 1, so a padding mask for (batch, heads, query_len, key_len) is (batch, 1, 1, key_len).
    is_causal: query i may attend key j only if j <= i (top-left aligned, as torch's is_causal). With a
           mask as well, a position must be allowed by both.
    bias:  optional floats added to the scores (e.g. ALiBi, lesson 07), with one dim per score dim, each
           that size or 1, like the mask.
    returns output (..., query_len, value_dim), weights (..., query_len, key_len). A query row with nothing
    to attend gets zero weights and a zero output, never NaN.
    """
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
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])  # (..., query_len, key_len)
    if bias is not None:
        check_float("bias", bias)
        check_same_dtype(query=query, bias=bias)
        _check_broadcast("bias", bias, scores.shape)
        scores = scores + bias
    allowed = _sdpa_mask(mask, scores.shape, is_causal, scores.device)
    weights = torch.softmax(scores, dim=-1) if allowed is None else _masked_softmax(scores, allowed.expand_as(scores))
    return weights @ value, weights


def initial_score_std(input_std, weight_std, d_model: int, head_dim: int) -> torch.Tensor:
    """The standard deviation of a score q . k at initialisation (lesson 04), before any division.

    Inputs x with independent components of mean 0 and standard deviation ``input_std``; projections W_Q, W_K of
    shape (d_model, head_dim) with independent entries of mean 0 and standard deviation ``weight_std``; a query
    q = x W_Q and a key k = x' W_K from two independent inputs x, x' (two different positions). Then

        Var(q_i) = d_model input_std^2 weight_std^2          (a sum of d_model independent products)
        Var(q . k) = head_dim Var(q_i)^2                      (a sum of head_dim independent products q_i k_i)
        std(q . k) = sqrt(head_dim) d_model input_std^2 weight_std^2

    computed in that last form, without the variance, which overflows float32 long before the standard
    deviation does. With torch.nn.Linear's default initialisation (uniform, weight_std^2 = 1 / (3 d_model)) it is
    sqrt(head_dim) input_std^2 / 3. input_std, weight_std: floats or float tensors (broadcast together).
    """
    d_model = check_positive_int("d_model", d_model, "the size of each input vector")
    head_dim = check_positive_int("head_dim", head_dim, "the size of each query and key")
    input_std, weight_std = torch.as_tensor(input_std), torch.as_tensor(weight_std)
    for name, std in (("input_std", input_std), ("weight_std", weight_std)):
        check_float(name, std)
        if bool((std < 0).any()):
            raise ValueError(f"{name} should be standard deviations (>= 0), got a negative value {std.min().item()}")
    return math.sqrt(head_dim) * d_model * input_std**2 * weight_std**2


def query_scale_for_weight(weight, competitors, head_dim: int) -> torch.Tensor:
    """How long a query must be along one key for scaled dot-product attention to give that key ``weight`` when
    ``competitors`` other keys score 0 (lesson 04's previous-token head: one-hot keys, a query c e_j).

    The key scores c / sqrt(head_dim) and the others 0, so its weight is exp(a) / (exp(a) + m) with
    a = c / sqrt(head_dim) and m competitors; solving for c:

        c = sqrt(head_dim) ln(weight m / (1 - weight))

    weight: a float or tensor in (0, 1); competitors: an int or integer tensor of counts >= 1 (broadcast together).
    Returns a float tensor; a larger c gives the key more weight.
    """
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
    return math.sqrt(head_dim) * torch.log(weight * competitors / (1 - weight))


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


def _sdpa_mask(mask, score_shape: torch.Size, is_causal: bool, device) -> torch.Tensor | None:
    allowed = None
    if mask is not None:
        check_bool_mask("mask", mask)
        _check_broadcast("mask", mask, score_shape)
        allowed = mask
    if is_causal:
        causal = causal_mask(score_shape[-2], score_shape[-1], align="top-left", device=device)
        allowed = causal if allowed is None else allowed & causal
    return allowed


# --------------------------------------------------------------------------------------------
# Modules
# --------------------------------------------------------------------------------------------


class AdditiveAttention(nn.Module):
    """Bahdanau attention with learned W_a, U_a, v_a.

    v_a starts at zero, as in Bahdanau et al. (Appendix B.1), so attention starts uniform;
    W_a and U_a use the usual 1/sqrt(fan_in) scale rather than the paper's N(0, 0.001^2).
    """

    def __init__(self, dec_dim: int, enc_dim: int, attn_dim: int):
        super().__init__()
        for name, value in (("dec_dim", dec_dim), ("enc_dim", enc_dim), ("attn_dim", attn_dim)):
            check_positive_int(name, value, "a vector size")
        self.dec_dim, self.enc_dim, self.attn_dim = dec_dim, enc_dim, attn_dim
        self.W_a = nn.Parameter(torch.randn(attn_dim, dec_dim) * dec_dim**-0.5)
        self.U_a = nn.Parameter(torch.randn(attn_dim, enc_dim) * enc_dim**-0.5)
        self.v_a = nn.Parameter(torch.zeros(attn_dim))

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """(batch, src_len, enc_dim) -> U_a h_j: (batch, src_len, attn_dim), once per sentence."""
        check_tensor("keys", keys, 3, "(batch, src_len, enc_dim)")
        check_float("keys", keys)
        check_size("keys", keys, 2, self.enc_dim, "enc_dim this attention was built with")
        check_same_dtype(keys=keys, U_a=self.U_a)
        return keys @ self.U_a.T

    def forward(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        mask: torch.Tensor | None = None,
        projected_keys: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """query (batch, dec_dim), keys (batch, src_len, enc_dim), mask (batch, src_len)
        -> context (batch, enc_dim), weights (batch, src_len)."""
        check_tensor("query", query, 2, "(batch, dec_dim)")
        check_float("query", query)
        check_size("query", query, 1, self.dec_dim, "dec_dim this attention was built with")
        check_same_dtype(query=query, W_a=self.W_a)
        check_tensor("keys", keys, 3, "(batch, src_len, enc_dim)")
        check_size("keys", keys, 0, query.shape[0], "the batch size of query", "a batch of one is not stretched")
        check_size("keys", keys, 2, self.enc_dim, "enc_dim this attention was built with")
        if projected_keys is None:
            projected_keys = self.project_keys(keys)
        else:
            check_tensor("projected_keys", projected_keys, 3, "(batch, src_len, attn_dim)")
            if projected_keys.shape != (*keys.shape[:2], self.attn_dim):
                raise ValueError(
                    f"projected_keys should have shape (batch, src_len, attn_dim) = "
                    f"{(*keys.shape[:2], self.attn_dim)}, got shape {tuple(projected_keys.shape)}; "
                    "pass project_keys(keys) of the same sentences"
                )
        if mask is not None:
            _check_mask(mask, keys.shape[:2])  # the scores' shape: (batch, src_len)
        scores = _additive(query @ self.W_a.T, projected_keys, self.v_a)
        weights = torch.softmax(scores, dim=-1) if mask is None else _masked_softmax(scores, mask)
        return _context(weights, keys), weights


LUONG_SCORES = ("dot", "general", "concat", "location")


class LuongAttention(nn.Module):
    """Luong et al.'s global attention with one of the scores ``dot``, ``general``, ``concat``, ``location``.

    forward(query (batch, tgt_len, dec_dim), keys (batch, src_len, enc_dim), mask (batch, src_len) or None)
    -> context (batch, tgt_len, enc_dim), weights (batch, tgt_len, src_len): every decoder step at once.
    """

    def __init__(self, score: str, dec_dim: int, enc_dim: int, attn_dim: int = 64, max_src_len: int = 20):
        super().__init__()
        check_choice("score", score, LUONG_SCORES)
        for name, value in (("dec_dim", dec_dim), ("enc_dim", enc_dim), ("attn_dim", attn_dim),
                            ("max_src_len", max_src_len)):  # fmt: skip
            check_positive_int(name, value, "a size")
        self.score, self.dec_dim, self.enc_dim = score, dec_dim, enc_dim
        if score == "dot" and dec_dim != enc_dim:
            raise ValueError(
                f"enc_dim should equal dec_dim={dec_dim} for the dot score, got {enc_dim}: the dot score needs "
                "dec_dim == enc_dim; use 'general'"
            )
        if score == "general":
            self.W_a = nn.Parameter(torch.randn(dec_dim, enc_dim) * enc_dim**-0.5)
        elif score == "concat":
            self.W_a = nn.Parameter(torch.randn(attn_dim, dec_dim + enc_dim) * (dec_dim + enc_dim) ** -0.5)
            self.v_a = nn.Parameter(torch.randn(attn_dim) * attn_dim**-0.5)
        elif score == "location":
            self.W_a = nn.Parameter(torch.randn(max_src_len, dec_dim) * dec_dim**-0.5)

    def scores(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """query (batch, tgt_len, dec_dim) or (batch, dec_dim), keys (batch, src_len, enc_dim) -> the scores."""
        _check_query_keys(query, keys)
        check_size("query", query, -1, self.dec_dim, "dec_dim this attention was built with")
        check_size("keys", keys, 2, self.enc_dim, "enc_dim this attention was built with")
        check_same_dtype(query=query, weights=next(self.parameters(), query))
        if self.score == "dot":
            return _dot(query, keys)
        if self.score == "general":
            return _general(query, keys, self.W_a)
        if self.score == "concat":
            return _concat(query, keys, self.W_a, self.v_a)
        if keys.shape[1] > self.W_a.shape[0]:
            location_score(query, self.W_a, keys.shape[1])  # raises the error that says why
        return (query @ self.W_a.T)[..., : keys.shape[1]]

    def forward(
        self, query: torch.Tensor, keys: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        check_tensor("query", query, 3, "(batch, tgt_len, dec_dim)")
        scores = self.scores(query, keys)
        if mask is not None:
            check_bool_mask("mask", mask)
            check_tensor("mask", mask, 2, "(batch, src_len)")
            if mask.shape != (keys.shape[0], keys.shape[1]):
                raise ValueError(
                    f"mask should have shape (batch, src_len) = {tuple(keys.shape[:2])} as the keys, got shape "
                    f"{tuple(mask.shape)}; build it with padding_mask(src_lengths, src_len)"
                )
            weights = _masked_softmax(scores, mask[:, None, :].expand_as(scores))
        else:
            weights = torch.softmax(scores, dim=-1)
        return _context(weights, keys), weights
