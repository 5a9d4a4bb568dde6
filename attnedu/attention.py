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

Each public function checks its arguments in one call at its top (the checks are in ``attnedu._validate_attention``),
then computes; the package's own callers, whose arguments are checked already, use the unchecked
``_scaled_dot_product_attention`` and ``_masked_softmax``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._validate import check_positive_int
from ._validate_attention import (
    check_additive,
    check_additive_forward,
    check_concat,
    check_context,
    check_dot,
    check_general,
    check_local_p,
    check_local_p_sum,
    check_location,
    check_luong,
    check_luong_forward,
    check_luong_scores,
    check_masked_softmax,
    check_project_keys,
    check_query_scale,
    check_score_std,
    check_sdpa,
)
from .masks import _causal_block

# --------------------------------------------------------------------------------------------
# Scores of encoder-decoder attention (lessons 02-03). query: (batch, dec_dim) for one decoder
# step, or (batch, tgt_len, dec_dim) for every step at once; keys: (batch, src_len, enc_dim).
# Each returns (batch, src_len) or (batch, tgt_len, src_len) to match the query.
# --------------------------------------------------------------------------------------------


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
    check_additive(query, keys, W_a, U_a, v_a)
    return _additive(query @ W_a.T, keys @ U_a.T, v_a)


def _additive(projected_query: torch.Tensor, projected_keys: torch.Tensor, v_a: torch.Tensor) -> torch.Tensor:
    """v_a^T tanh(W_a s + U_a h_j) from the projections, inputs already checked."""
    steps, single = _as_steps(projected_query)
    scores = torch.tanh(steps[:, :, None, :] + projected_keys[:, None, :, :]) @ v_a.reshape(-1)
    return scores[:, 0] if single else scores


def dot_score(query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Luong dot: e_j = s^T h_j. Needs dec_dim == enc_dim. Shapes as for additive_score."""
    check_dot(query, keys)
    return _dot(query, keys)


def _dot(query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    steps, single = _as_steps(query)
    scores = steps @ keys.transpose(1, 2)  # (batch, tgt_len, src_len)
    return scores[:, 0] if single else scores


def general_score(query: torch.Tensor, keys: torch.Tensor, W_a: torch.Tensor) -> torch.Tensor:
    """Luong general: e_j = s^T W_a h_j, W_a: (dec_dim, enc_dim). Shapes as for additive_score."""
    check_general(query, keys, W_a)
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
    check_concat(query, keys, W_a, v_a)
    return _concat(query, keys, W_a, v_a)


def _concat(query: torch.Tensor, keys: torch.Tensor, W_a: torch.Tensor, v_a: torch.Tensor) -> torch.Tensor:
    dec_dim = query.shape[-1]
    return _additive(query @ W_a[:, :dec_dim].T, keys @ W_a[:, dec_dim:].T, v_a)


def location_score(query: torch.Tensor, W_a: torch.Tensor, src_len: int) -> torch.Tensor:
    """Luong location: e = W_a s, one score per source position, computed from the decoder state alone.

    W_a: (max_src_len, dec_dim). Returns the first ``src_len`` scores: (batch, src_len) or
    (batch, tgt_len, src_len). It never looks at the source words, only at where they are.
    """
    src_len = check_location(query, W_a, src_len)
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
    half_width = check_local_p(scores, center, half_width)
    positions = torch.arange(scores.shape[1], dtype=scores.dtype, device=scores.device)[None, :]
    p = center.to(scores.dtype)[:, None]
    window = (positions - torch.floor(p + 0.5)).abs() <= half_width  # the 2D + 1 positions nearest round(p_t)
    sigma = max(half_width, 1e-6) / 2
    return _masked_softmax(scores, window) * torch.exp(-((positions - p) ** 2) / (2 * sigma**2))


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
    half_width = check_local_p_sum(center, half_width, src_lengths)
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
    check_masked_softmax(scores, mask)
    return torch.softmax(scores, dim=-1) if mask is None else _masked_softmax(scores, mask)


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
    check_context(weights, values)
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
    check_sdpa(query, key, value, mask, is_causal, bias)
    return _scaled_dot_product_attention(query, key, value, mask, is_causal, bias)


def _scaled_dot_product_attention(query, key, value, mask=None, is_causal=False, bias=None):
    """scaled_dot_product_attention on inputs already checked (the package's own models call this one)."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])  # (..., query_len, key_len)
    if bias is not None:
        scores = scores + bias
    if is_causal:
        causal = _causal_block(0, scores.shape[-2], 0, scores.shape[-1], device=scores.device)
        mask = causal if mask is None else mask & causal
    weights = torch.softmax(scores, dim=-1) if mask is None else _masked_softmax(scores, mask.expand_as(scores))
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
    d_model, head_dim, input_std, weight_std = check_score_std(input_std, weight_std, d_model, head_dim)
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
    head_dim, weight, competitors = check_query_scale(weight, competitors, head_dim)
    return math.sqrt(head_dim) * torch.log(weight * competitors / (1 - weight))


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
        check_project_keys(self, keys)
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
        check_additive_forward(self, query, keys, mask, projected_keys)
        return self._attend(query, keys, mask, projected_keys)

    def _attend(self, query, keys, mask, projected_keys) -> tuple[torch.Tensor, torch.Tensor]:
        """forward on inputs already checked (BahdanauDecoder's steps call this one)."""
        if projected_keys is None:
            projected_keys = keys @ self.U_a.T  # project_keys(keys)
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
        check_luong(score, dec_dim, enc_dim, attn_dim, max_src_len, LUONG_SCORES)
        self.score, self.dec_dim, self.enc_dim = score, dec_dim, enc_dim
        if score == "general":
            self.W_a = nn.Parameter(torch.randn(dec_dim, enc_dim) * enc_dim**-0.5)
        elif score == "concat":
            self.W_a = nn.Parameter(torch.randn(attn_dim, dec_dim + enc_dim) * (dec_dim + enc_dim) ** -0.5)
            self.v_a = nn.Parameter(torch.randn(attn_dim) * attn_dim**-0.5)
        elif score == "location":
            self.W_a = nn.Parameter(torch.randn(max_src_len, dec_dim) * dec_dim**-0.5)

    def scores(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """query (batch, tgt_len, dec_dim) or (batch, dec_dim), keys (batch, src_len, enc_dim) -> the scores."""
        check_luong_scores(self, query, keys)
        return self._scores(query, keys)

    def _scores(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        if self.score == "dot":
            return _dot(query, keys)
        if self.score == "general":
            return _general(query, keys, self.W_a)
        if self.score == "concat":
            return _concat(query, keys, self.W_a, self.v_a)
        return (query @ self.W_a.T)[..., : keys.shape[1]]  # location: the first src_len of W_a s

    def forward(
        self, query: torch.Tensor, keys: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        check_luong_forward(self, query, keys, mask)
        scores = self._scores(query, keys)
        if mask is None:
            weights = torch.softmax(scores, dim=-1)
        else:
            weights = _masked_softmax(scores, mask[:, None, :].expand_as(scores))
        return _context(weights, keys), weights
