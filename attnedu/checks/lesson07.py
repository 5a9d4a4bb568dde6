"""Checks for the exercises of lesson 07 (positional encoding): sinusoidal positions added before the query and
key projections; RoPE in the *interleaved* layout (the lesson showed halves); RoPE scores of queries and keys at
different positions, as with a cache; ALiBi's biases for any number of heads with queries after a cache (the lesson
showed the slopes for 6 and 12 heads, square biases only); and a graded prediction (``checks.prediction``),
wrong_layout_prediction: what loading weights trained with the halves layout into interleaved code does to the
scores, predicted before the check measures it.

Every exercise has test cases with a batch of one (for ALiBi: one head) and a large one (more positions than the
tables people precompute: 512 for a sinusoidal encoding, 2048 for RoPE's angles), and, where padding applies (the
sinusoidal encoding of a padded batch), cases with and without it; RoPE rotates whatever vectors it is given and
ALiBi's bias depends on positions only, so their cases have no padding. Batch, length and width differ from each
other so that an encoding taken along the wrong axis shows, and positions do not always start at 0 (a cache of
earlier keys), so that ignoring them shows. The known-wrong variants include an off-by-one in both directions
(positions counted from 1 and taken from the axis below; the frequency index one pair too high and one too low,
as when the RoFormer paper's 1-based theta_i is coded with a 0-based index; ALiBi's slope index from 0 and from
2). Angles are computed in float64 by the references; the large cases keep float32 rounding of angles in the
thousands of radians within the tolerance. The learner's functions may not run anything from
``attnedu.positional`` (``forbidden``): the exercises ask for their own code.
"""

from __future__ import annotations

import math

import torch

from ..masks import padding_mask
from ..positional import alibi_bias, alibi_slopes, apply_rope, sinusoidal_encoding
from .exercise import LARGE, ONE, PADDED, UNPADDED, Case, Exercise, Layout, Part, Variant, generator, kinds, randn
from .prediction import prediction_exercise

LESSON = "07_positional_encoding"
OWN_CODE = ("attnedu.positional",)  # the exercises ask for the learner's own code: the package's earns nothing

# --------------------------------------------------------------------------------------------
# sinusoidal_queries_keys: the encoding, added where it belongs (before the projections)
# --------------------------------------------------------------------------------------------


def _sinusoidal_queries_keys(embeddings, W_q, W_k):
    """embeddings (batch, seq_len, d_model), W_q, W_k (d_model, head_dim) -> queries, keys (batch, seq_len,
    head_dim): (embeddings + PE) @ W."""
    _, seq_len, d_model = embeddings.shape
    encoded = embeddings + sinusoidal_encoding(seq_len, d_model)
    return encoded @ W_q, encoded @ W_k


def _sinusoidal_cases() -> list[Case]:
    g = generator(70)

    def case(batch, seq_len, d_model, head_dim, tags, lengths=None, scale=1.0, note=""):
        x = scale * randn(g, batch, seq_len, d_model)
        padded = ""
        if lengths is not None:  # the padding token's embedding is zeros (nn.Embedding's padding_idx)
            x = x * padding_mask(torch.tensor(lengths), seq_len)[:, :, None]
            padded = f", lengths {lengths}, zero embeddings at padding"
        W_q, W_k = randn(g, d_model, head_dim) / math.sqrt(d_model), randn(g, d_model, head_dim) / math.sqrt(d_model)
        description = f"batch {batch}, seq_len {seq_len}, d_model {d_model}, head_dim {head_dim}{padded}" + (
            f"; {note}" if note else ""
        )
        return Case(description, (x, W_q, W_k), tags)

    return [
        case(3, 6, 8, 4, kinds(PADDED), lengths=[6, 2, 4]),
        case(2, 4, 6, 10, kinds(UNPADDED), note="head_dim wider than d_model"),
        case(1, 7, 4, 2, kinds(ONE, UNPADDED)),
        case(1, 5, 10, 6, kinds(ONE, PADDED), lengths=[3]),
        case(4, 3, 12, 8, kinds(UNPADDED), note="more sentences than positions"),
        case(2, 600, 16, 8, kinds(LARGE, PADDED), lengths=[600, 431], scale=4.0,
             note="600 positions (more than a table of 512), embeddings scaled by sqrt(d_model) = 4"),
    ]  # fmt: skip


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


def _encoded_with(encoding):
    """queries, keys with ``encoding(seq_len, d_model)`` in place of the sinusoidal one, added before projecting."""

    def queries_keys(x, W_q, W_k):
        encoded = x + encoding(x.shape[1], x.shape[2])
        return encoded @ W_q, encoded @ W_k

    return queries_keys


def _sinusoidal_layout(args: tuple) -> tuple[Layout, Layout]:
    x = args[0]
    real = x.abs().sum(dim=-1) > 0  # padding positions hold zero embeddings
    layout = Layout(positions=1, real=real, words=("real tokens", "padding positions"))
    return layout, layout


def _by_batch(x, W_q, W_k):
    encoded = x + sinusoidal_encoding(x.shape[0], x.shape[2])[:, None, :]
    return encoded @ W_q, encoded @ W_k


def _skips_padding(x, W_q, W_k):
    encoded = x + sinusoidal_encoding(x.shape[1], x.shape[2]) * (x.abs().sum(-1, keepdim=True) > 0)
    return encoded @ W_q, encoded @ W_k


def _after_projections(x, W_q, W_k):
    """The encoding added to the queries and keys (of width head_dim), after the projections."""
    q, k = x @ W_q, x @ W_k
    return q + sinusoidal_encoding(x.shape[1], q.shape[2]), k + sinusoidal_encoding(x.shape[1], k.shape[2])


SINUSOIDAL_QUERIES_KEYS = Exercise(
    name="sinusoidal_queries_keys",
    lesson=LESSON,
    params=("embeddings", "W_q", "W_k"),
    returns=(("batch", "seq_len", "head_dim"), ("batch", "seq_len", "head_dim")),
    output_names=("queries", "keys"),
    reference=_sinusoidal_queries_keys,
    make_cases=_sinusoidal_cases,
    layout=_sinusoidal_layout,
    forbidden=OWN_CODE,
    variants=(
        Variant(
            "the encoding was added after the projections, to the queries and keys (an encoding of width "
            "head_dim). The encoding belongs to the embeddings, before W_q and W_k: positions added after the "
            "projections never pass through W_q and W_k, so the model cannot learn how much position should weigh "
            "in a score.",
            _after_projections,
        ),
        Variant(
            "only the queries got positions: the keys were projected from the embeddings alone (your queries "
            "match, your keys do not). Queries and keys both come from the same encoded embeddings.",
            lambda x, W_q, W_k: (_sinusoidal_queries_keys(x, W_q, W_k)[0], x @ W_k),
        ),
        Variant(
            "only the keys got positions: the queries were projected from the embeddings alone (your keys match, "
            "your queries do not). Queries and keys both come from the same encoded embeddings.",
            lambda x, W_q, W_k: (x @ W_q, _sinusoidal_queries_keys(x, W_q, W_k)[1]),
        ),
        Variant(
            "the outputs are in the wrong order: you returned (keys, queries). The exercise returns the queries "
            "first, then the keys.",
            lambda x, W_q, W_k: _sinusoidal_queries_keys(x, W_q, W_k)[::-1],
        ),
        Variant(
            "no positions at all: your queries and keys are the plain projections of the embeddings. Add the "
            "sinusoidal encoding to the embeddings before projecting.",
            lambda x, W_q, W_k: (x @ W_q, x @ W_k),
        ),
        Variant(
            "the positions were taken from the batch axis (dim 0, one too low): every word of sentence b got PE(b), "
            "the same vector at every position. The position of embeddings[b, t] is t, dim 1: add a (seq_len, "
            "d_model) encoding, which broadcasts over the batch.",
            _by_batch,
        ),
        Variant(
            "off by one: the positions count from 1, so the first word got PE(1) and each word the vector of the "
            "position after its own. Positions count from 0: the first word gets PE(0).",
            _encoded_with(lambda n, d: _sinusoid(n, d, positions=torch.arange(1, n + 1))),
        ),
        Variant(
            "sin and cos are swapped: even features hold cos and odd features sin. The formula puts sin at the even "
            "features, PE(pos, 2i) = sin(...), and cos at the odd ones, PE(pos, 2i+1) = cos(...).",
            _encoded_with(lambda n, d: _sinusoid(n, d, swap=True)),
        ),
        Variant(
            "the pairs are mixed up: the sines fill the first half of the features and the cosines the second "
            "(concatenated, as in tensor2tensor). The formula interleaves them: sin at even features 2i, cos at "
            "odd features 2i+1, the two of a pair side by side.",
            _encoded_with(lambda n, d: _sinusoid(n, d, layout="halves")),
        ),
        Variant(
            "the frequencies are wrong: the exponent is i / d_model, with i = 0, 1, 2, ... counting pairs, half the "
            "formula's, so the wavelengths grow too slowly across the features. The formula divides by "
            "10000^(2i / d_model): the exponent's numerator runs over the even features 0, 2, 4, ...",
            _encoded_with(lambda n, d: _sinusoid(n, d, exponent=lambda two_i, d: two_i / 2 / d)),
        ),
        Variant(
            "the frequencies are wrong: the exponent is 2 * (2i) / d_model, twice the formula's, as when the even "
            "feature index, which already is 2i, is doubled again. The exponent is 2i / d_model.",
            _encoded_with(lambda n, d: _sinusoid(n, d, exponent=lambda two_i, d: 2 * two_i / d)),
        ),
        Variant(
            "the frequency base is wrong: 1000 instead of the formula's 10000, so every wavelength is shorter.",
            _encoded_with(lambda n, d: _sinusoid(n, d, base=1000.0)),
        ),
        Variant(
            "off by one: the frequency index is one pair too high (pair i turns at 1/10000^(2(i+1)/d_model)), as "
            "when i counts pairs from 1. Pair i, counted from 0, turns at 1/10000^(2i/d_model).",
            _encoded_with(lambda n, d: _sinusoid(n, d, exponent=lambda two_i, d: (two_i + 2) / d)),
        ),
        Variant(
            "the embeddings were left out: your queries and keys are projections of the encoding alone, the same "
            "for every sentence. Add the encoding to the embeddings.",
            lambda x, W_q, W_k: _sinusoidal_queries_keys(torch.zeros_like(x), W_q, W_k),
        ),
        Variant(
            "the encoding was left out at the padding positions (where the embeddings are zero). Add it at every "
            "position: which positions are padding is for the attention mask to say.",
            _skips_padding,
        ),
    ),
    hint=(
        "Two steps, in this order: give every embedding its position's vector, then project. Which axis of "
        "`embeddings` counts positions, and where do W_q and W_k come in?",
        "PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(same angle), for pos = 0 .. seq_len-1: a "
        "(seq_len, d_model) table that broadcasts over the batch. Then queries = (embeddings + PE) @ W_q, and keys "
        "the same with W_k.",
        "`positions = torch.arange(seq_len)[:, None]`, `frequencies = 10000 ** (-torch.arange(0, d_model, 2) / "
        "d_model)`; `pe = torch.zeros(seq_len, d_model)`; `pe[:, 0::2] = torch.sin(positions * frequencies)`; "
        "`pe[:, 1::2] = torch.cos(positions * frequencies)`; `encoded = embeddings + pe`; "
        "`return encoded @ W_q, encoded @ W_k`.",
    ),
)

# --------------------------------------------------------------------------------------------
# apply_rope_interleaved: RoPE in the layout the lesson did not show
# --------------------------------------------------------------------------------------------


def _rope_interleaved(x, positions):
    return apply_rope(x, positions, layout="interleaved")


def _rope(x, positions, *, pair=lambda i: i, exponent=2.0, base=10000.0, direction=1.0, swap=False,
          layout="interleaved", put_back="same", freqs="pairs"):  # fmt: skip
    """A variant of RoPE, angles in float64 as in the reference. ``layout``: which features pair up; ``put_back``:
    "halves" writes interleaved pairs back as two halves; ``freqs="repeat"`` lays the frequencies out for halves
    (cat([f, f])) over interleaved features."""
    half = x.shape[-1] // 2
    i = torch.arange(half, dtype=torch.float64)
    frequencies = base ** (-exponent * pair(i) / x.shape[-1])
    angles = direction * positions.to(torch.float64)[:, None] * frequencies  # (seq_len, half)
    if freqs == "rotate_half":  # frequencies repeated for interleaved pairs, partners taken from the other half
        per_feature = angles.repeat_interleave(2, dim=-1)
        cos, sin = torch.cos(per_feature).to(x.dtype), torch.sin(per_feature).to(x.dtype)
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin
    if freqs == "repeat":  # per-feature angles cat([f, f]) applied to interleaved pairs
        per_feature = torch.cat([angles, angles], dim=-1)
        cos, sin = torch.cos(per_feature).to(x.dtype), torch.sin(per_feature).to(x.dtype)
        rotated = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
        return x * cos + rotated * sin
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    if swap:
        cos, sin = sin, cos
    a, b = (x[..., 0::2], x[..., 1::2]) if layout == "interleaved" else (x[..., :half], x[..., half:])
    first, second = a * cos - b * sin, a * sin + b * cos
    if (layout if put_back == "same" else put_back) == "interleaved":
        return torch.stack([first, second], dim=-1).flatten(-2)
    return torch.cat([first, second], dim=-1)


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
        case((2, 2, 16, 4), list(range(2040, 2056)), kinds(LARGE), scale=1000.0,
             note="values around ±1000, positions past a table of 2048"),
    ]  # fmt: skip


def _rope_layout(args: tuple) -> tuple[Layout]:
    return (Layout(positions=args[0].dim() - 2),)


APPLY_ROPE_INTERLEAVED = Exercise(
    name="apply_rope_interleaved",
    lesson=LESSON,
    params=("x", "positions"),
    returns=(("...", "seq_len", "head_dim"),),
    reference=_rope_interleaved,
    make_cases=_apply_rope_cases,
    layout=_rope_layout,
    forbidden=OWN_CODE,
    variants=(
        Variant(
            "the pairs are mixed up: your output pairs feature i with feature i + head_dim/2, the halves layout of "
            "the lesson. This exercise uses the interleaved layout (the RoFormer paper, GPT-J, Meta's Llama): "
            "feature 2i pairs with its neighbour, feature 2i+1. Weights trained with one layout give wrong scores "
            "under the other.",
            lambda x, p: apply_rope(x, p, layout="halves"),
        ),
        Variant(
            "the pairs were rotated correctly but written back as two halves (the rotated first elements "
            "concatenated with the rotated second ones), so your features are in the wrong places. Each rotated "
            "pair goes back where it came from: its first element to the even feature 2i, its second to 2i+1.",
            lambda x, p: _rope(x, p, put_back="halves"),
        ),
        Variant(
            "the rotation goes the wrong way: each pair turned by -theta. A rotation by theta maps (a, b) to "
            "(a cos - b sin, a sin + b cos).",
            lambda x, p: _rope(x, p, direction=-1.0),
        ),
        Variant(
            "cos and sin are swapped: your pairs become (a sin - b cos, a cos + b sin), a rotation by 90 degrees "
            "minus theta: a quarter turn, then the wrong way. Scores still depend on the offset alone, but not as in "
            "the models trained with (a cos - b sin, a sin + b cos): use that.",
            lambda x, p: _rope(x, p, swap=True),
        ),
        Variant(
            "`positions` was ignored: your function rotates row t by position t, as if every sequence started at "
            "0. With a cache the queries sit at later positions: use the positions you are given.",
            lambda x, p: _rope_interleaved(x, torch.arange(x.shape[-2])),
        ),
        Variant(
            "off by one: the positions count from 1 (row t was rotated by position t + 1), and `positions` was "
            "ignored. Use the positions you are given.",
            lambda x, p: _rope_interleaved(x, torch.arange(1, x.shape[-2] + 1)),
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
            "the frequencies are wrong: the exponent is -i/head_dim, with i counting pairs, half the formula's, so "
            "the later pairs turn too fast. It is -2i/head_dim, with 2i the pair's even feature index.",
            lambda x, p: _rope(x, p, exponent=1.0),
        ),
        Variant(
            "the base is wrong: 1000 instead of 10000, so every pair but the first turns faster than in the models "
            "that use RoPE, whose weights were trained with 10000.",
            lambda x, p: _rope(x, p, base=1000.0),
        ),
        Variant(
            "the frequencies are laid out for the halves layout (the list of frequencies twice, one after the "
            "other) while the features are paired as interleaved, so the two features of a pair turn at different "
            "speeds and the result is no rotation. With interleaved pairs, both features of pair i, 2i and 2i+1, "
            "turn at frequency i.",
            lambda x, p: _rope(x, p, freqs="repeat"),
        ),
        Variant(
            "the frequencies are laid out for interleaved pairs (each repeated twice, f0 f0 f1 f1 ...) but each "
            "feature's partner was taken from the other half (Hugging Face's rotate_half, written for the halves "
            "layout), so the features that turn together are not the ones that pair. Position 0 matches (no "
            "rotation at all); every later position differs. In the interleaved layout feature 2i+1 is the partner of "
            "feature 2i.",
            lambda x, p: _rope(x, p, freqs="rotate_half"),
        ),
        Variant(
            "your output is x unchanged: nothing was rotated.",
            lambda x, p: x.clone(),
        ),
    ),
    hint=(
        "It is the lesson's rotation with other partners: which features form pair i now, and where does each "
        "rotated feature go back?",
        "Pair i is (x[..., 2i], x[..., 2i+1]), turned by theta_i = position * 10000^(-2i/head_dim): "
        "(a, b) -> (a cos - b sin, a sin + b cos). The angles are (seq_len, head_dim/2) and broadcast over the "
        "leading axes; the rotated first elements go back to the even features, the second ones to the odd ones.",
        "`a, b = x[..., 0::2], x[..., 1::2]`; `angles = positions.float()[:, None] * 10000.0 ** "
        "(-torch.arange(0, head_dim, 2).float() / head_dim)`; `cos, sin = angles.cos(), angles.sin()`; "
        "`return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)`.",
    ),
)

# --------------------------------------------------------------------------------------------
# rope_scores: scores of queries and keys at different positions (a case the lesson did not show)
# --------------------------------------------------------------------------------------------


def _rope_scores(
    q: torch.Tensor, k: torch.Tensor, q_positions: torch.Tensor, k_positions: torch.Tensor
) -> torch.Tensor:
    """q (batch, heads, query_len, head_dim) at q_positions (query_len,), k (batch, heads, key_len, head_dim) at
    k_positions (key_len,) -> (batch, heads, query_len, key_len): RoPE(q) . RoPE(k) / sqrt(head_dim), with the
    interleaved layout of exercise 2."""
    scores = _rope_interleaved(q, q_positions) @ _rope_interleaved(k, k_positions).transpose(-2, -1)
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


def _scores_with(rope=_rope_interleaved, scale=None, q_at=None, k_at=None):
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
    forbidden=OWN_CODE,
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
            "the pairs are mixed up: your rotation pairs feature i with feature i + head_dim/2 (the lesson's halves "
            "layout). This exercise uses the interleaved layout of exercise 2: feature 2i pairs with feature 2i+1.",
            _scores_with(rope=lambda x, p: apply_rope(x, p, layout="halves")),
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
            "your output is the scores transposed, (batch, heads, key_len, query_len): keys against queries. Rows "
            "are queries and columns keys: entry (m, n) is the score of query m for key n.",
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
    hint=(
        "Rotate first, then score. Each side is rotated by its own positions; nothing says query_len == key_len.",
        "s_mn = RoPE(q, m) . RoPE(k, n) / sqrt(head_dim), with RoPE your interleaved rotation of exercise 2: rotate "
        "every query by q_positions and every key by k_positions, then take the usual scaled dot products.",
        "`rq = apply_rope_interleaved(q, q_positions)`; `rk = apply_rope_interleaved(k, k_positions)`; "
        "`return rq @ rk.transpose(-2, -1) / math.sqrt(q.shape[-1])`.",
    ),
)

# --------------------------------------------------------------------------------------------
# alibi_bias: ALiBi for any number of heads, queries after a cache (the lesson showed square biases only)
# --------------------------------------------------------------------------------------------


def _alibi_cases() -> list[Case]:
    def case(heads: int, query_len: int, key_len: int, tags, note: str = "") -> Case:
        description = f"{heads} heads, {query_len} queries, {key_len} keys" + (f"; {note}" if note else "")
        return Case(description, (heads, query_len, key_len), tags)

    return [
        case(6, 5, 5, kinds(), note="6 heads, not a power of two"),
        case(8, 4, 4, kinds(), note="a power of two: the plain geometric sequence"),
        case(12, 3, 7, kinds(), note="the 3 queries are the last 3 of 7 positions, as with a cache"),
        case(1, 1, 5, kinds(ONE), note="one head, one query (one decoding step)"),
        case(3, 4, 6, kinds(), note="3 heads"),
        case(5, 2, 2, kinds(), note="5 heads"),
        case(24, 200, 300, kinds(LARGE), note="distances up to 299"),
    ]


def _rule(num_heads, start=1):
    """The reference implementation's rule, with the power-of-two sequence's k counted from ``start``."""
    if num_heads & (num_heads - 1) == 0:
        return [2.0 ** (-8.0 * k / num_heads) for k in range(start, num_heads + start)]
    lower = 1 << (num_heads.bit_length() - 1)
    return _rule(lower, start) + _rule(2 * lower, start)[0::2][: num_heads - lower]


def _slopes(num_heads, rule="reference", start=1):
    if rule == "plain":
        return torch.tensor([2.0 ** (-8.0 * k / num_heads) for k in range(1, num_heads + 1)])
    if rule == "start":
        return torch.tensor(_rule(num_heads, start))
    if rule == "next power":
        upper = 1 << (num_heads - 1).bit_length()
        return alibi_slopes(upper)[:num_heads]
    if rule == "sorted":
        return alibi_slopes(num_heads).sort(descending=True).values
    raise ValueError(rule)


def _alibi(num_heads, query_len, key_len, slopes=None, distance="i - j", queries="bottom-right", sign=-1.0):
    slopes = alibi_slopes(num_heads) if slopes is None else slopes
    first = key_len - query_len if queries == "bottom-right" else 0
    i = torch.arange(first, first + query_len)[:, None]
    j = torch.arange(key_len)[None, :]
    d = {"i - j": i - j, "|i - j|": (i - j).abs(), "clamped": (i - j).clamp(min=0)}[distance]
    return sign * slopes[:, None, None] * d[None].float()


ALIBI_BIAS = Exercise(
    name="alibi_bias",
    lesson=LESSON,
    params=("num_heads", "query_len", "key_len"),
    returns=(("num_heads", "query_len", "key_len"),),
    reference=alibi_bias,
    make_cases=_alibi_cases,
    layout=lambda args: (Layout(positions=1),),
    units=(("head", "heads", "head index"),),  # axis 0 is the heads, not a batch of sentences
    forbidden=OWN_CODE,
    variants=(
        Variant(
            "the slopes are 2^(-8k/num_heads) for every number of heads. That geometric sequence is the rule for a "
            "power of two only; for any other number the reference implementation takes the slopes of the closest "
            "power of two below (for 6 heads: those of 4), then every other slope of twice that many (of the 8's: "
            "the 1st and the 3rd), as many as are missing.",
            lambda h, q, k: _alibi(h, q, k, slopes=_slopes(h, "plain")),
        ),
        Variant(
            "the slopes are the first num_heads of the next power of two above (for 6 heads, the first 6 of 8's). "
            "The reference takes the closest power of two *below* (for 6: all 4 of its slopes), then every other "
            "slope of twice that many for the rest.",
            lambda h, q, k: _alibi(h, q, k, slopes=_slopes(h, "next power")),
        ),
        Variant(
            "the right slopes, in the wrong order: sorted from steepest to gentlest. The reference lists the slopes "
            "of the power of two first, then the extra ones from twice as many, and head h uses slope h of that "
            "list (a model trained with it expects exactly that head order).",
            lambda h, q, k: _alibi(h, q, k, slopes=_slopes(h, "sorted")),
        ),
        Variant(
            "off by one: the slope index starts at 0, so the first head's slope is 2^0 = 1. For a power of two n "
            "the slopes are 2^(-8k/n) for k = 1 .. n: the first is 2^(-8/n).",
            lambda h, q, k: _alibi(h, q, k, slopes=_slopes(h, "start", start=0)),
        ),
        Variant(
            "off by one: the slope index starts at 2, so every head has the slope of the next one, and the last "
            "slope is below 2^-8. For a power of two n the slopes are 2^(-8k/n) for k = 1 .. n.",
            lambda h, q, k: _alibi(h, q, k, slopes=_slopes(h, "start", start=2)),
        ),
        Variant(
            "the sign is wrong: your bias grows with distance, +m (i - j), so far keys are favoured. ALiBi "
            "penalises distance: -m (i - j), 0 for the query's own key, more negative the further back.",
            lambda h, q, k: _alibi(h, q, k, sign=1.0),
        ),
        Variant(
            "the queries were placed at positions 0, 1, ... (top-left). With fewer queries than keys they are the "
            "*last* query_len positions, as when decoding with a cache: query i sits at position "
            "key_len - query_len + i.",
            lambda h, q, k: _alibi(h, q, k, queries="top-left"),
        ),
        Variant(
            "the bias uses |i - j|, so keys after the query are penalised too. This exercise asks for -m (i - j) at "
            "every pair, positive for later keys, which the causal mask removes anyway; only keys at or before the "
            "query (j <= i) agree.",
            lambda h, q, k: _alibi(h, q, k, distance="|i - j|"),
        ),
        Variant(
            "the bias is 0 for keys after the query (the distance clamped at 0, or the bias cut to its lower "
            "triangle). This exercise asks for -m (i - j) at every pair, positive for later keys, and leaves those "
            "to the causal mask.",
            lambda h, q, k: _alibi(h, q, k, distance="clamped"),
        ),
    ),
    hint=(
        "Two separate parts: one slope per head, and a distance per (query, key) pair. The bias is their product "
        "with a minus sign, broadcast to (num_heads, query_len, key_len). The slopes are the hard part when "
        "num_heads is not a power of two.",
        "Slopes: for a power of two n, 2^(-8k/n), k = 1 .. n. Otherwise, with n the largest power of two below "
        "num_heads: the n slopes of n, then slopes 1, 3, 5, ... (every other, counting from 1) of the sequence for "
        "2n, until there are num_heads. Distance: query i sits at position key_len - query_len + i, so "
        "d = (key_len - query_len + i) - j; bias[h, i, j] = -slope[h] * d.",
        "`def slopes(n): return [2 ** (-8 * k / n) for k in range(1, n + 1)]`; "
        "`lower = 2 ** int(math.log2(num_heads))`; `m = slopes(lower) + slopes(2 * lower)[0::2][: num_heads - "
        "lower]` (for a power of two, just `slopes(num_heads)`); `i = torch.arange(key_len - query_len, key_len)"
        "[:, None]`; `j = torch.arange(key_len)[None, :]`; `return -torch.tensor(m)[:, None, None] * (i - j)`.",
    ),
)

# --------------------------------------------------------------------------------------------
# wrong_layout_prediction: a graded prediction (checks.prediction): halves weights loaded into interleaved code
# --------------------------------------------------------------------------------------------

LAYOUT_OFFSETS = range(6)  # the scores shown: query at position m = 0..5, key at 0


def _layout_vectors() -> tuple[torch.Tensor, torch.Tensor]:
    """The query and key of the measurement: (16,) each, from seed 1."""
    g = generator(1)
    return randn(g, 16), randn(g, 16)


def _layout_score(layout: str, m: int, n: int) -> float:
    q, k = _layout_vectors()
    rotated_q = apply_rope(q[None], torch.tensor([m]), layout=layout)
    return float(rotated_q @ apply_rope(k[None], torch.tensor([n]), layout=layout).T)


def _wrong_layout() -> tuple[bool, bool]:
    """The course's measurement: (do the interleaved scores depend on the offset alone (their spread over 12 start
    positions at offset 3 below 1e-4), are they the halves layout's scores (every offset 0..5 within 1e-4))."""
    spread = [_layout_score("interleaved", n + 3, n) for n in range(0, 200, 17)]
    offset_only = max(spread) - min(spread) < 1e-4
    same = all(abs(_layout_score("interleaved", m, 0) - _layout_score("halves", m, 0)) < 1e-4 for m in LAYOUT_OFFSETS)
    return offset_only, same


def _layout_details(measured: tuple) -> str:
    rows = []
    for name, layout in (("trained (halves)", "halves"), ("loaded (interleaved)", "interleaved")):
        scores = " ".join(f"{_layout_score(layout, m, 0):6.2f}" for m in LAYOUT_OFFSETS)
        rows.append(f"{name:>21}, score by offset 0..5: {scores}")
    return "\n".join(rows)


def _layout_diagnosis(index: int, guess: bool, measured: tuple) -> str:
    if index == 0:
        return (
            "each layout turns a query and a key pair by pair, by angles proportional to their positions, the same "
            "way for both: whichever features it pairs, their dot product depends on m - n alone"
        )
    return (
        "the weights hold the model's pairs in features i and i + head_dim/2, but the interleaved code turns "
        "features 2i and 2i + 1 together, at pair i's frequency: the scores still depend on the offset alone, but "
        "not in the way the model learned"
    )


WRONG_LAYOUT_PREDICTION = prediction_exercise(
    name="wrong_layout_prediction",
    lesson=LESSON,
    question="whether the scores depend on the offset alone, and whether they are the trained ones",
    parts=(Part("the scores depend on the offset alone", bool), Part("they are the scores it was trained with", bool)),
    measure=_wrong_layout,
    details=_layout_details,
    diagnose=_layout_diagnosis,
    forbidden=OWN_CODE,  # a prediction, not a measurement made with the course's RoPE
    hint=(
        "Two separate questions. What makes RoPE's score depend on m - n alone, and does that need a particular "
        "pairing of the features? And which features did the model learn to turn together?",
        "The score depends on the offset alone because the query and the key are turned by the same rule, pair by "
        "pair, with angles proportional to their positions: any fixed pairing applied to both keeps that. The "
        "trained weights put each of the model's pairs in features i and i + head_dim/2; the interleaved code turns "
        "features 2i and 2i + 1 together instead, at pair i's frequency.",
        "Answer each question with True or False: `return offset_only, same_scores`, the two booleans you decided on "
        "(the check then measures both).",
    ),
)

EXERCISES = (SINUSOIDAL_QUERIES_KEYS, APPLY_ROPE_INTERLEAVED, WRONG_LAYOUT_PREDICTION, ROPE_SCORES, ALIBI_BIAS)
