"""Checks for the exercises of lesson 07 (positional encoding).

Every exercise has test cases with a batch of one and a large one (more positions than the tables people
precompute: 512 for a sinusoidal encoding, 2048 for RoPE's angles), and, where padding applies (the
sinusoidal encoding of a padded batch), cases with and without it; RoPE rotates whatever vectors it is
given, so its cases have no padding. Batch, length and width differ from each other so that an encoding
taken along the wrong axis shows, and positions do not always start at 0 (a cache of earlier keys), so
that ignoring them shows. The known-wrong variants include an off-by-one in both directions (positions
counted from 1 and taken from the axis below; the frequency index one pair too high and one too low, as
when the RoFormer paper's 1-based theta_i is coded with a 0-based index). Angles are computed in float64
by the references; the large cases keep float32 rounding of angles in the thousands of radians within
the tolerance.
"""

from __future__ import annotations

import math

import torch

from ..masks import padding_mask
from ..positional import apply_rope, sinusoidal_encoding
from .exercise import LARGE, ONE, PADDED, UNPADDED, Case, Exercise, Layout, Variant, generator, kinds, randn

LESSON = "07_positional_encoding"

# --------------------------------------------------------------------------------------------
# add_sinusoidal
# --------------------------------------------------------------------------------------------


def _add_sinusoidal(embeddings: torch.Tensor) -> torch.Tensor:
    """embeddings (batch, seq_len, d_model) -> the same plus PE(pos) at position pos of every sentence."""
    _, seq_len, d_model = embeddings.shape
    return embeddings + sinusoidal_encoding(seq_len, d_model)


def _add_sinusoidal_cases() -> list[Case]:
    g = generator(70)

    def case(batch: int, seq_len: int, d_model: int, tags, lengths: list[int] | None = None, scale=1.0, note=""):
        x = scale * randn(g, batch, seq_len, d_model)
        padded = ""
        if lengths is not None:  # the padding token's embedding is zeros (nn.Embedding's padding_idx)
            x = x * padding_mask(torch.tensor(lengths), seq_len)[:, :, None]
            padded = f", lengths {lengths}, zero embeddings at padding"
        description = f"batch {batch}, seq_len {seq_len}, d_model {d_model}{padded}" + (f"; {note}" if note else "")
        return Case(description, (x,), tags)

    return [
        case(3, 6, 8, kinds(PADDED), lengths=[6, 2, 4]),
        case(2, 4, 6, kinds(UNPADDED)),
        case(1, 7, 4, kinds(ONE, UNPADDED)),
        case(1, 5, 10, kinds(ONE, PADDED), lengths=[3]),
        case(4, 3, 12, kinds(UNPADDED), note="more sentences than positions"),
        case(
            2,
            600,
            16,
            kinds(LARGE, PADDED),
            lengths=[600, 431],
            scale=4.0,
            note="600 positions (more than a table of 512), embeddings scaled by sqrt(d_model) = 4",
        ),
    ]


def _sinusoid(seq_len, d_model, positions=None, exponent=lambda two_i, d: two_i / d, base=10000.0, layout="pairs",
              swap=False):  # fmt: skip
    """A variant of the encoding: (seq_len, d_model), computed in float64 like the reference."""
    pos = torch.arange(seq_len, dtype=torch.float64) if positions is None else positions.to(torch.float64)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    scale = base ** exponent(two_i, d_model)
    angles = pos[:, None] / scale
    first, second = (torch.cos(angles), torch.sin(angles)) if swap else (torch.sin(angles), torch.cos(angles))
    if layout == "halves":
        return torch.cat([first, second], dim=-1).float()
    return torch.stack([first, second], dim=-1).flatten(-2).float()


def _sinusoidal_layout(args: tuple) -> tuple[Layout]:
    (x,) = args
    real = x.abs().sum(dim=-1) > 0  # padding positions hold zero embeddings
    return (Layout(positions=1, real=real, words=("real tokens", "padding positions")),)


def _plus(encoding) -> callable:
    def add(x):
        return x + encoding(x.shape[1], x.shape[2])

    return add


ADD_SINUSOIDAL = Exercise(
    name="add_sinusoidal",
    lesson=LESSON,
    params=("embeddings",),
    returns=(("batch", "seq_len", "d_model"),),
    reference=_add_sinusoidal,
    make_cases=_add_sinusoidal_cases,
    layout=_sinusoidal_layout,
    variants=(
        Variant(
            "the positions were taken from the batch axis (dim 0, one too low): every word of sentence b got PE(b), "
            "the same vector at every position, so the model still cannot tell positions apart. The position of "
            "embeddings[b, t] is t, dim 1: add `pe[:seq_len]` of shape (seq_len, d_model), which broadcasts over the "
            "batch. (Code written for (seq_len, batch, d_model) inputs, such as PyTorch's old tutorial, does this "
            "to batch-first inputs.)",
            lambda x: x + sinusoidal_encoding(x.shape[0], x.shape[2])[:, None, :],
        ),
        Variant(
            "off by one: the positions count from 1, so the first word got PE(1). Positions count from 0: "
            "`torch.arange(seq_len)`.",
            _plus(lambda n, d: _sinusoid(n, d, positions=torch.arange(1, n + 1))),
        ),
        Variant(
            "sin and cos are swapped: even features hold cos and odd features sin. The formula puts "
            "PE(pos, 2i) = sin(...) and PE(pos, 2i+1) = cos(...): `pe[:, 0::2] = torch.sin(...)`.",
            _plus(lambda n, d: _sinusoid(n, d, swap=True)),
        ),
        Variant(
            "the sines fill the first half of the features and the cosines the second (concatenated, as in "
            "tensor2tensor). The formula interleaves them: sin at even features 2i, cos at odd features 2i+1 "
            "(`pe[:, 0::2]` and `pe[:, 1::2]`).",
            _plus(lambda n, d: _sinusoid(n, d, layout="halves")),
        ),
        Variant(
            "the frequencies are wrong: the exponent is i / d_model, with i = 0, 1, 2, ... counting pairs. The "
            "formula divides by 10000^(2i / d_model): the exponent runs over the even features 0, 2, 4, ..., "
            "`torch.arange(0, d_model, 2) / d_model`.",
            _plus(lambda n, d: _sinusoid(n, d, exponent=lambda two_i, d: two_i / 2 / d)),
        ),
        Variant(
            "the frequencies are wrong: the exponent is 2 * (2i) / d_model, twice the formula's. "
            "`torch.arange(0, d_model, 2)` already holds 2i: divide it by d_model without doubling it again.",
            _plus(lambda n, d: _sinusoid(n, d, exponent=lambda two_i, d: 2 * two_i / d)),
        ),
        Variant(
            "the frequency base is 1000; the formula's is 10000.",
            _plus(lambda n, d: _sinusoid(n, d, base=1000.0)),
        ),
        Variant(
            "off by one: the frequency index is one pair too high (pair i turns at 1/10000^(2(i+1)/d_model)), as "
            "when i counts pairs from 1. Pair i, counted from 0, turns at 1/10000^(2i/d_model).",
            _plus(lambda n, d: _sinusoid(n, d, exponent=lambda two_i, d: (two_i + 2) / d)),
        ),
        Variant(
            "your output is the encoding alone, the same for every sentence: add it to the embeddings.",
            lambda x: sinusoidal_encoding(x.shape[1], x.shape[2]).expand_as(x).clone(),
        ),
        Variant(
            "the encoding was left out at the padding positions (where the embeddings are zero). Add it at every "
            "position: which positions are padding is for the attention mask to say, and a padded batch must "
            "give the real tokens the same vectors as an unpadded one.",
            lambda x: x + sinusoidal_encoding(x.shape[1], x.shape[2]) * (x.abs().sum(-1, keepdim=True) > 0),
        ),
    ),
    hint="Build the encoding for positions 0..seq_len-1: `positions = torch.arange(seq_len)[:, None]` "
    "(seq_len, 1) and `frequencies = 10000 ** (-torch.arange(0, d_model, 2) / d_model)` (d_model/2,), so "
    "`angles = positions * frequencies` is (seq_len, d_model/2). Fill `pe[:, 0::2]` with the sines and `pe[:, 1::2]` "
    "with the cosines, then add `pe`, (seq_len, d_model), which broadcasts over the batch.",
)

# --------------------------------------------------------------------------------------------
# apply_rope
# --------------------------------------------------------------------------------------------


def _rope(x, positions, *, pair=lambda i: i, exponent=2.0, base=10000.0, direction=1.0, swap=False, freqs="halves"):
    """A variant of RoPE in the halves layout, angles in float64 as in the reference."""
    half = x.shape[-1] // 2
    i = torch.arange(half, dtype=torch.float64)
    frequencies = base ** (-exponent * pair(i) / x.shape[-1])
    angles = direction * positions.to(torch.float64)[:, None] * frequencies  # (seq_len, half)
    if freqs == "repeat_interleave":  # per-feature frequencies laid out for interleaved pairs
        per_feature = (positions.to(torch.float64)[:, None] * frequencies.repeat_interleave(2))[:, : 2 * half]
        cos, sin = torch.cos(per_feature).to(x.dtype), torch.sin(per_feature).to(x.dtype)
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    if swap:
        cos, sin = sin, cos
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


def _apply_rope_cases() -> list[Case]:
    g = generator(71)

    def case(shape: tuple[int, ...], positions: list[int], tags, scale: float = 1.0, note: str = "") -> Case:
        names = ("batch", "heads", "seq_len", "head_dim") if len(shape) == 4 else ("batch", "seq_len", "head_dim")
        sizes = ", ".join(f"{n} {s}" for n, s in zip(names, shape, strict=True))
        listed = positions if len(positions) <= 6 else f"{positions[0]} to {positions[-1]}"
        description = f"{sizes}, positions {listed}" + (f"; {note}" if note else "")
        return Case(description, (scale * randn(g, *shape), torch.tensor(positions)), tags)

    return [
        case((2, 3, 5, 8), [0, 1, 2, 3, 4], kinds()),
        case((1, 2, 4, 6), [0, 1, 2, 3], kinds(ONE)),
        case((3, 2, 3, 4), [7, 8, 9], kinds(), note="the last 3 positions of a longer text, as with a cache"),
        case((2, 6, 10), [1, 2, 3, 4, 5, 6], kinds(), note="no heads axis: x is (batch, seq_len, head_dim)"),
        case((1, 3, 2, 12), [20, 3], kinds(ONE), note="positions in any order"),
        case(
            (2, 2, 16, 4),
            list(range(2040, 2056)),
            kinds(LARGE),
            scale=1000.0,
            note="values around ±1000, positions past a table of 2048",
        ),
    ]


def _rope_layout(args: tuple) -> tuple[Layout]:
    x = args[0]
    return (
        Layout(positions=x.dim() - 2, halves=("the first element of each pair", "the second element of each pair")),
    )


APPLY_ROPE = Exercise(
    name="apply_rope",
    lesson=LESSON,
    params=("x", "positions"),
    returns=(("...", "seq_len", "head_dim"),),
    reference=apply_rope,
    make_cases=_apply_rope_cases,
    layout=_rope_layout,
    variants=(
        Variant(
            "your output pairs feature 2i with feature 2i+1 (the interleaved layout of the RoFormer paper and "
            "GPT-J). This exercise uses the halves layout: feature i pairs with feature i + head_dim/2 "
            "(`a, b = x[..., :half], x[..., half:]`). Weights trained with one layout give wrong scores under the "
            "other.",
            lambda x, p: apply_rope(x, p, layout="interleaved"),
        ),
        Variant(
            "the rotation goes the wrong way: each pair turned by -theta. A rotation by theta maps (a, b) to "
            "(a cos - b sin, a sin + b cos).",
            lambda x, p: _rope(x, p, direction=-1.0),
        ),
        Variant(
            "cos and sin are swapped: your pairs become (a sin - b cos, a cos + b sin), which is not a rotation "
            "(it is a rotation by 90 degrees minus theta, with a flip). Use (a cos - b sin, a sin + b cos).",
            lambda x, p: _rope(x, p, swap=True),
        ),
        Variant(
            "`positions` was ignored: your function rotates row t by position t, as if every sequence started at "
            "0. With a cache the queries sit at later positions: use the positions you are given.",
            lambda x, p: apply_rope(x, torch.arange(x.shape[-2])),
        ),
        Variant(
            "off by one: the positions count from 1 (row t was rotated by position t + 1), and `positions` was "
            "ignored. Use the positions you are given.",
            lambda x, p: apply_rope(x, torch.arange(1, x.shape[-2] + 1)),
        ),
        Variant(
            "off by one: the frequency index is one pair too high: pair i turns at base^(-2(i+1)/head_dim), as "
            "when pairs are counted from 1 in base^(-2i/d). Counting pairs from 0, pair i turns at "
            "base^(-2i/head_dim): pair 0 at 1 radian per position.",
            lambda x, p: _rope(x, p, pair=lambda i: i + 1),
        ),
        Variant(
            "off by one: the frequency index is one pair too low: pair i turns at base^(-2(i-1)/head_dim), as when "
            "the paper's theta_i = 10000^(-2(i-1)/d), written for i counted from 1, is coded with i counted from "
            "0. Counting pairs from 0, pair i turns at base^(-2i/head_dim): pair 0 at 1 radian per position.",
            lambda x, p: _rope(x, p, pair=lambda i: i - 1),
        ),
        Variant(
            "the frequencies are wrong: the exponent is -i/head_dim, with i counting pairs. It is -2i/head_dim: "
            "`base ** (-torch.arange(0, head_dim, 2) / head_dim)`.",
            lambda x, p: _rope(x, p, exponent=1.0),
        ),
        Variant(
            "the frequencies are laid out for interleaved pairs (`freqs.repeat_interleave(2)`, each frequency "
            "twice in a row) while the features are paired as halves, so the two features of a pair turn at "
            "different speeds and the result is no rotation. With halves, repeat the whole list: "
            "`torch.cat([freqs, freqs])`.",
            lambda x, p: _rope(x, p, freqs="repeat_interleave"),
        ),
        Variant(
            "your output is x unchanged: nothing was rotated.",
            lambda x, p: x.clone(),
        ),
    ),
    hint="With `half = x.shape[-1] // 2`, the frequencies are `10000 ** (-torch.arange(half) * 2 / x.shape[-1])` "
    "(half,), and the angles `positions[:, None] * frequencies` (seq_len, half), which broadcast against "
    "`a, b = x[..., :half], x[..., half:]`. Return `torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)`.",
)

# --------------------------------------------------------------------------------------------
# rope_scores: scores of queries and keys at different positions (a case the lesson did not show)
# --------------------------------------------------------------------------------------------


def _rope_scores(
    q: torch.Tensor, k: torch.Tensor, q_positions: torch.Tensor, k_positions: torch.Tensor
) -> torch.Tensor:
    """q (batch, heads, query_len, head_dim) at q_positions (query_len,), k (batch, heads, key_len, head_dim) at
    k_positions (key_len,) -> (batch, heads, query_len, key_len): RoPE(q) . RoPE(k) / sqrt(head_dim)."""
    scores = apply_rope(q, q_positions) @ apply_rope(k, k_positions).transpose(-2, -1)
    return scores / math.sqrt(q.shape[-1])


def _rope_scores_cases() -> list[Case]:
    g = generator(72)

    def case(sizes, q_positions, k_positions, tags, scale: float = 1.0, note: str = "") -> Case:
        batch, heads, head_dim = sizes

        def listed(p):
            return p if len(p) <= 6 else f"{p[0]} to {p[-1]}"

        description = (
            f"batch {batch}, heads {heads}, head_dim {head_dim}; queries at positions {listed(q_positions)}, "
            f"keys at {listed(k_positions)}" + (f"; {note}" if note else "")
        )
        q = scale * randn(g, batch, heads, len(q_positions), head_dim)
        k = scale * randn(g, batch, heads, len(k_positions), head_dim)
        return Case(description, (q, k, torch.tensor(q_positions), torch.tensor(k_positions)), tags)

    return [
        case((2, 3, 8), [2, 3, 4, 5], list(range(6)), kinds(), note="the last 4 of 6 positions, as with a cache"),
        case((1, 2, 6), [4], list(range(5)), kinds(ONE), note="one decoding step"),
        case((2, 2, 6), [0, 1, 2], [0, 1, 2], kinds(), note="self-attention"),
        case((3, 2, 4), [10, 11], list(range(5, 12)), kinds(), note="a window of keys that does not start at 0"),
        case((1, 4, 10), [3, 4, 5, 6, 7], [0, 9], kinds(ONE), note="more queries than keys"),
        case(
            (2, 2, 4),
            [2060, 2061, 2062, 2063],
            list(range(2052, 2064)),
            kinds(LARGE),
            scale=30.0,
            note="values around ±30, positions past a table of 2048",
        ),
    ]


def _scores_with(rope=_rope, scale=None, q_at=None, k_at=None):
    def scores(q, k, qp, kp):
        qp = qp if q_at is None else q_at(q, qp)
        kp = kp if k_at is None else k_at(k, kp)
        s = rope(q, qp) @ rope(k, kp).transpose(-2, -1)
        return s / (math.sqrt(q.shape[-1]) if scale is None else scale(q.shape[-1]))

    return scores


def _scores_layout(args: tuple) -> tuple[Layout]:
    return (Layout(positions=2),)


def _unrotated(x, p):
    return x


ROPE_SCORES = Exercise(
    name="rope_scores",
    lesson=LESSON,
    params=("q", "k", "q_positions", "k_positions"),
    returns=(("batch", "heads", "query_len", "key_len"),),
    reference=_rope_scores,
    make_cases=_rope_scores_cases,
    layout=_scores_layout,
    variants=(
        Variant(
            "the scores are not scaled: divide the dot products by sqrt(head_dim), as in scaled dot-product attention.",
            _scores_with(scale=lambda d: 1.0),
        ),
        Variant(
            "the scores are divided by head_dim; scaled dot-product attention divides by sqrt(head_dim).",
            _scores_with(scale=lambda d: float(d)),
        ),
        Variant(
            "the queries were placed at positions 0, 1, ... (`q_positions` ignored), as if they came first. When "
            "decoding with a cache they are the *last* positions: rotate the queries by `q_positions`.",
            _scores_with(q_at=lambda q, p: torch.arange(q.shape[-2])),
        ),
        Variant(
            "the keys were placed at positions 0, 1, ... (`k_positions` ignored). Rotate the keys by `k_positions`.",
            _scores_with(k_at=lambda k, p: torch.arange(k.shape[-2])),
        ),
        Variant(
            "both `q_positions` and `k_positions` were ignored: queries and keys were rotated by 0, 1, ... Use the "
            "positions you are given; only their difference matters to the score.",
            _scores_with(q_at=lambda q, p: torch.arange(q.shape[-2]), k_at=lambda k, p: torch.arange(k.shape[-2])),
        ),
        Variant(
            "only the queries were rotated: rotate the keys too, by their own positions. Then the score depends on "
            "the offset m - n alone.",
            lambda q, k, qp, kp: _rope_scores(q, k, qp, torch.zeros_like(kp)),
        ),
        Variant(
            "only the keys were rotated: rotate the queries too, by their own positions. Then the score depends on "
            "the offset m - n alone.",
            lambda q, k, qp, kp: _rope_scores(q, k, torch.zeros_like(qp), kp),
        ),
        Variant(
            "your rotation pairs feature 2i with feature 2i+1 (the interleaved layout). This exercise uses the "
            "halves layout of exercise 2: feature i pairs with feature i + head_dim/2.",
            _scores_with(rope=lambda x, p: apply_rope(x, p, layout="interleaved")),
        ),
        Variant(
            "the rotation goes the wrong way (each pair turned by -theta), which turns every score into the score "
            "at the opposite offset. A rotation by theta maps (a, b) to (a cos - b sin, a sin + b cos).",
            _scores_with(rope=lambda x, p: _rope(x, p, direction=-1.0)),
        ),
        Variant(
            "off by one: the frequency index is one pair too high, base^(-2(i+1)/head_dim); pair i, counted from "
            "0, turns at base^(-2i/head_dim).",
            _scores_with(rope=lambda x, p: _rope(x, p, pair=lambda i: i + 1)),
        ),
        Variant(
            "off by one: the frequency index is one pair too low, base^(-2(i-1)/head_dim); pair i, counted from "
            "0, turns at base^(-2i/head_dim).",
            _scores_with(rope=lambda x, p: _rope(x, p, pair=lambda i: i - 1)),
        ),
        Variant(
            "your output is the scores transposed, (batch, heads, key_len, query_len): `k @ q^T` instead of "
            "`q @ k^T`. Rows are queries: `rotated_q @ rotated_k.transpose(-2, -1)`.",
            lambda q, k, qp, kp: _rope_scores(q, k, qp, kp).transpose(-2, -1),
        ),
        Variant(
            "your output is the softmax of the scores (attention weights). Return the scores themselves.",
            lambda q, k, qp, kp: torch.softmax(_rope_scores(q, k, qp, kp), dim=-1),
        ),
        Variant(
            "nothing was rotated: these are the plain scaled dot products of q and k. Rotate each query and key by "
            "its position first.",
            _scores_with(rope=_unrotated),
        ),
    ),
    hint="Rotate first, then score: `rq = apply_rope(q, q_positions)`, `rk = apply_rope(k, k_positions)` (your "
    "function from exercise 2), then `rq @ rk.transpose(-2, -1) / math.sqrt(head_dim)`. Each side keeps its own "
    "positions; query_len and key_len may differ.",
)

EXERCISES = (ADD_SINUSOIDAL, APPLY_ROPE, ROPE_SCORES)
