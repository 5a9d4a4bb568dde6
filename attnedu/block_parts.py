"""The parts of today's Transformer block (lesson 09; vectors are rows: x W; heads count from 0):

rms_norm, RMSNorm         Zhang & Sennrich 2019: x / sqrt(mean(x^2) + eps) * g, no centring, no shift
group_rms_norm            the same within groups of consecutive features (Mamba-2; a head's output alone)
swiglu, SwiGLU            Shazeer 2020: (SiLU(x W_gate) * (x W_up)) W_down, three matrices, no biases
clamped_swiglu            gpt-oss's gated layer: Swish with a slope, clamped, the linear part shifted by 1
swiglu_hidden             the SwiGLU width that keeps the 2017 feed-forward layer's parameter count
qk_norm_scores            RMSNorm on each head's queries and keys before the scores (QK-norm)
qk_score_bound            the largest score QK-norm allows: sqrt(head_dim) * max_i |g_q,i g_k,i|

Each public function shows its math in two places: the docstring (the equation, in the lesson's notation) and a
private function just above it (the same equation as code, unchecked). The public function checks what it was given
(the checks are at the end of this module) and calls the private one; the modules here and the blocks
(``attnedu.blocks``) call the private ones directly, with inputs they built themselves.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._validate import (
    check_finite,
    check_float,
    check_min_dims,
    check_number,
    check_positive_int,
    check_same_dtype,
    check_size,
    check_tensor,
    describe,
)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm (Zhang & Sennrich 2019) over the last axis, the features of each position:

        RMSNorm(x) = x / sqrt(mean_i(x_i^2) + eps) * g

    x (..., d_model), weight g (d_model,) -> (..., d_model). Unlike LayerNorm it neither subtracts the mean nor adds a
    shift: it only rescales each vector to a root mean square of 1, then multiplies feature i by g_i.
    """
    eps = _check_norm_args("x", x, "weight", weight, eps, "d_model")
    return _rms_norm(x, weight, eps)


def _group_rms_norm(x: torch.Tensor, weight: torch.Tensor, groups: int, eps: float) -> torch.Tensor:
    grouped = x.unflatten(-1, (groups, x.shape[-1] // groups))  # (..., groups, group_size)
    normed = grouped * torch.rsqrt(grouped.pow(2).mean(dim=-1, keepdim=True) + eps)
    return normed.flatten(-2) * weight


def group_rms_norm(x: torch.Tensor, weight: torch.Tensor, groups: int, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm within groups of features: the d_model features of each position are cut into ``groups`` groups of
    s = d_model // groups consecutive features, and each group is divided by its own root mean square:

        y[j s : (j+1) s] = x[j s : (j+1) s] / sqrt(mean_{i in group j}(x_i^2) + eps) * g[j s : (j+1) s]

    x (..., d_model), weight g (d_model,), one gain per feature -> (..., d_model). ``groups=1`` is ``rms_norm``.
    Mamba-2's output norm works this way (``group_size`` in its RMSNormGated), and with one group per head it
    normalises each head's output alone, as the Differential Transformer does before merging its heads.
    """
    eps = _check_norm_args("x", x, "weight", weight, eps, "d_model")
    groups = check_positive_int("groups", groups, "how many groups the features are cut into")
    if x.shape[-1] % groups:
        raise ValueError(
            f"groups should divide d_model = {x.shape[-1]} (the last dimension of x), got groups={groups}: every "
            "group holds the same number of consecutive features"
        )
    return _group_rms_norm(x, weight, groups, eps)


class RMSNorm(nn.Module):
    """``rms_norm`` with a trained gain g (d_model,), starting at ones; equal to ``torch.nn.RMSNorm(d_model, eps)``."""

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        check_positive_int("d_model", d_model, "the model width")
        self.eps = check_number("eps", eps, "added to the mean of squares", 0.0)
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_features("x", x, self.weight, "d_model of this norm")
        return _rms_norm(x, self.weight, self.eps)


def _swiglu(x: torch.Tensor, W_gate: torch.Tensor, W_up: torch.Tensor, W_down: torch.Tensor) -> torch.Tensor:
    return (nn.functional.silu(x @ W_gate) * (x @ W_up)) @ W_down


def swiglu(x: torch.Tensor, W_gate: torch.Tensor, W_up: torch.Tensor, W_down: torch.Tensor) -> torch.Tensor:
    """The SwiGLU feed-forward layer (Shazeer 2020), applied to every position alone:

        FFN(x) = (SiLU(x W_gate) * (x W_up)) W_down,   SiLU(z) = z * sigmoid(z)

    x (..., d_model); W_gate, W_up (d_model, d_ff); W_down (d_ff, d_model) -> (..., d_model). The gate decides, feature
    by feature, how much of the "up" projection passes. Three matrices instead of the 2017 layer's two, so models
    take d_ff about 2/3 of 4 d_model to keep the parameter count (``swiglu_hidden``).
    """
    _check_swiglu_args(x, W_gate, W_up, W_down)
    return _swiglu(x, W_gate, W_up, W_down)


def _clamped_swiglu(x: torch.Tensor, W_in: torch.Tensor, W_down: torch.Tensor, alpha: float, limit: float):
    both = x @ W_in  # (..., 2 d_ff): the gate in the even columns, the linear part in the odd ones
    gate, linear = both[..., 0::2].clamp(max=limit), both[..., 1::2].clamp(-limit, limit)
    return (gate * torch.sigmoid(alpha * gate) * (linear + 1)) @ W_down


def clamped_swiglu(
    x: torch.Tensor, W_in: torch.Tensor, W_down: torch.Tensor, alpha: float = 1.702, limit: float = 7.0
) -> torch.Tensor:
    """gpt-oss's gated feed-forward layer (OpenAI 2025, ``gpt_oss/torch/model.py``: ``swiglu``), biases left out:

        [g, u] = x W_in            g the even columns of the product, u the odd ones (interleaved, as stored)
        g = min(g, limit);  u = clamp(u, -limit, limit)
        FFN(x) = (g * sigmoid(alpha g) * (u + 1)) W_down

    x (..., d_model); W_in (d_model, 2 d_ff); W_down (d_ff, d_model) -> (..., d_model). Against the lesson's SwiGLU:
    the gate's activation is Swish with slope ``alpha`` (alpha = 1 is SiLU; 1.702 makes it the sigmoid approximation
    of GELU), the gate is clamped from above only (g sigmoid(alpha g) is bounded below by itself, its least value
    about -0.28 / alpha), the linear part from both sides and shifted by 1, and the two projections share one matrix
    whose columns alternate gate, linear.
    """
    alpha, limit = _check_clamped_swiglu_args(x, W_in, W_down, alpha, limit)
    return _clamped_swiglu(x, W_in, W_down, alpha, limit)


def swiglu_hidden(d_model: int, multiple_of: int = 8) -> int:
    """The SwiGLU width that keeps the 2017 layer's parameter count: d_ff = 2/3 * 4 d_model = 8/3 d_model (three
    matrices of d_model x d_ff instead of two of d_model x 4 d_model), rounded up to a multiple of ``multiple_of``.

    This is Shazeer's (2020) and LLaMA-1's rule (LLaMA-1 7B: 8/3 * 4096 rounded up to a multiple of 256 = 11008).
    Later models choose d_ff freely and often wider (Llama 3 8B: 14336 = 3.5 d_model; Llama 3.2 1B: 8192 = 4
    d_model), so a real configuration's d_ff is read from it, not from this rule."""
    d_model = check_positive_int("d_model", d_model, "the model width")
    multiple_of = check_positive_int("multiple_of", multiple_of, "what d_ff is rounded up to")
    return multiple_of * math.ceil(8 * d_model / 3 / multiple_of)


class SwiGLU(nn.Module):
    """``swiglu`` with trained matrices: gate, up (d_model -> d_ff) and down (d_ff -> d_model), no biases."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        check_positive_int("d_model", d_model, "the model width")
        check_positive_int("d_ff", d_ff, "the feed-forward width")
        self.gate = nn.Linear(d_model, d_ff, bias=False)
        self.up = nn.Linear(d_model, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_features("x", x, self.down.weight, "d_model of this layer")
        return _swiglu(x, self.gate.weight.T, self.up.weight.T, self.down.weight.T)


def _qk_norm_scores(q, k, q_weight, k_weight, eps):
    return _rms_norm(q, q_weight, eps) @ _rms_norm(k, k_weight, eps).transpose(-2, -1) / math.sqrt(q.shape[-1])


def qk_norm_scores(
    q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor, eps: float = 1e-6
) -> torch.Tensor:
    """QK-norm: each head's queries and keys normalised before the scores, so that no score can grow without bound
    however large the projections become. Henry et al. (2020) proposed it with the l2 norm and one learned scale in
    place of 1/sqrt(head_dim); Dehghani et al. (2023) used LayerNorm; OLMo 2, Gemma 3 and Qwen3 use RMSNorm, as here:

        scores = rms_norm(q, g_q) rms_norm(k, g_k)^T / sqrt(head_dim)

    q (batch, heads, query_len, head_dim), k (batch, heads, key_len, head_dim); q_weight, k_weight (head_dim,), one
    gain shared by every head -> (batch, heads, query_len, key_len). (Real models then rotate the normalised queries
    and keys by RoPE before the product; ``qk_score_bound`` says what that changes.)
    """
    eps = _check_qk_args(q, k, q_weight, k_weight, eps)
    return _qk_norm_scores(q, k, q_weight, k_weight, eps)


def qk_score_bound(q_weight: torch.Tensor, k_weight: torch.Tensor) -> torch.Tensor:
    """The largest score QK-norm allows (``qk_norm_scores``), whatever the queries and keys:

        |s| <= sqrt(head_dim) * max_i |g_q,i g_k,i|

    A normalised vector q_hat has sum_i q_hat_i^2 = head_dim (less a little for eps), so the score
    sum_i q_hat_i g_q,i k_hat_i g_k,i / sqrt(head_dim) is at most max_i |g_q,i g_k,i| * |q_hat . k_hat| / sqrt(head_dim)
    <= max_i |g_q,i g_k,i| * head_dim / sqrt(head_dim) (Cauchy-Schwarz). Queries and keys with all their size on the
    feature i of the largest |g_q,i g_k,i| come as close as eps allows: the bound is the least one. The gains are
    trained, so the bound is not fixed: it grows as they do.

    Not covered: RoPE applied after the norm (OLMo 2, Gemma 3, Qwen3 rotate the normalised, gained queries and keys).
    A rotation keeps a vector's length but turns feature i into a mix of i and its partner, so the gains of a pair
    no longer meet feature by feature: the bound becomes sqrt(head_dim) times the largest product of a q gain and a k
    gain within one rotated pair, which can exceed the one here.

    q_weight, k_weight (..., head_dim): the gains, with any leading axes (one pair per layer, say) -> (...).
    """
    check_min_dims("q_weight", q_weight, 1, "(..., head_dim)")
    check_float("q_weight", q_weight)
    check_min_dims("k_weight", k_weight, 1, "(..., head_dim)")
    check_same_dtype(q_weight=q_weight, k_weight=k_weight)
    if k_weight.shape != q_weight.shape:
        raise ValueError(
            f"k_weight should have the shape of q_weight, {tuple(q_weight.shape)}, got {describe(k_weight)}"
        )
    check_finite("q_weight", q_weight, "a NaN or infinite gain has no bound")
    check_finite("k_weight", k_weight, "a NaN or infinite gain has no bound")
    return math.sqrt(q_weight.shape[-1]) * (q_weight * k_weight).abs().amax(dim=-1)


# --------------------------------------------------------------------------------------------
# Input checks of the public functions above (one form of message: attnedu._validate)
# --------------------------------------------------------------------------------------------


def _check_features(name: str, x, weight: torch.Tensor, meaning: str) -> None:
    """``x`` (..., d_model): a float tensor whose last dimension is ``weight``'s first (its rows as nn.Linear stores
    them, or a norm's gains), of ``weight``'s dtype."""
    check_min_dims(name, x, 1, "(..., d_model)")
    check_float(name, x)
    check_size(name, x, x.dim() - 1, weight.shape[0], meaning)
    check_same_dtype(**{name: x}, weights=weight)


def _check_norm_args(name: str, x, weight_name: str, weight, eps, features: str) -> float:
    check_min_dims(name, x, 1, f"(..., {features})")
    check_float(name, x)
    check_tensor(weight_name, weight, 1, f"({features},)")
    check_float(weight_name, weight)
    check_size(weight_name, weight, 0, x.shape[-1], f"{features}, the last dimension of {name}: one gain per feature")
    check_same_dtype(**{name: x, weight_name: weight})
    return check_number("eps", eps, "added to the mean of squares", 0.0)


def _check_matrix(name: str, W, shape: tuple[int, int], shape_doc: str, like: torch.Tensor, fix: str = "") -> None:
    check_tensor(name, W, 2, shape_doc)
    check_float(name, W)
    if tuple(W.shape) != shape:
        message = f"{name} should be {shape_doc} = {shape}, got {describe(W)}"
        raise ValueError(message + (f"; {fix}" if fix else ""))
    check_same_dtype(x=like, **{name: W})


_ROWS_FIX = "weights are applied as x @ W (vectors are rows); an nn.Linear's weight is the transpose: pass .weight.T"


def _check_input_rows(x, name: str, W, shape_doc: str) -> None:
    """The first matrix's rows meet x's features: a mismatch names both, and the likely cause."""
    check_tensor(name, W, 2, shape_doc)
    d_model = x.shape[-1]
    if W.shape[0] != d_model:
        fix = (f"it looks transposed: {_ROWS_FIX}" if W.shape[1] == d_model else
               f"x has {d_model} features in its last dimension: check x, or the matrix")  # fmt: skip
        raise ValueError(f"{name} should be {shape_doc} with d_model = {d_model} rows, one per feature of x, got "
                         f"{describe(W)}; {fix}")  # fmt: skip


def _check_swiglu_args(x, W_gate, W_up, W_down) -> None:
    check_min_dims("x", x, 1, "(..., d_model)")
    check_float("x", x)
    d_model = x.shape[-1]
    _check_input_rows(x, "W_gate", W_gate, "(d_model, d_ff)")
    d_ff = W_gate.shape[1]
    _check_matrix("W_gate", W_gate, (d_model, d_ff), "(d_model, d_ff)", x, _ROWS_FIX)
    _check_matrix("W_up", W_up, (d_model, d_ff), "(d_model, d_ff)", x, _ROWS_FIX)
    _check_matrix("W_down", W_down, (d_ff, d_model), "(d_ff, d_model)", x, _ROWS_FIX)


def _check_clamped_swiglu_args(x, W_in, W_down, alpha, limit) -> tuple[float, float]:
    check_min_dims("x", x, 1, "(..., d_model)")
    check_float("x", x)
    _check_input_rows(x, "W_in", W_in, "(d_model, 2 d_ff)")
    d_model, columns = W_in.shape
    if columns % 2:
        raise ValueError(
            f"W_in should have an even number of columns, 2 d_ff (gate and linear part alternating), got "
            f"{describe(W_in)}"
        )
    _check_matrix("W_in", W_in, (d_model, columns), "(d_model, 2 d_ff)", x)
    _check_matrix("W_down", W_down, (columns // 2, d_model), "(d_ff, d_model)", x, _ROWS_FIX)
    alpha = check_number("alpha", alpha, "the slope of the gate's Swish", 0.0, strict=True)
    limit = check_number("limit", limit, "where the gate and the linear part are clamped", 0.0, strict=True)
    return alpha, limit


def _check_qk_args(q, k, q_weight, k_weight, eps) -> float:
    check_tensor("q", q, 4, "(batch, heads, query_len, head_dim)")
    check_float("q", q)
    check_tensor("k", k, 4, "(batch, heads, key_len, head_dim)")
    check_float("k", k)
    if q.shape[:2] != k.shape[:2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k should share batch, heads and head_dim, got q {describe(q)} and k {describe(k)}")
    _check_norm_args("q", q, "q_weight", q_weight, eps, "head_dim")
    _check_norm_args("k", k, "k_weight", k_weight, eps, "head_dim")
    return check_number("eps", eps, "added to the mean of squares", 0.0)
