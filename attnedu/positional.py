"""Positions for attention, which otherwise cannot tell one order of its inputs from another (lesson 07).

    sinusoidal_encoding(num_positions, d_model)   Vaswani et al. 2017, Sec. 3.5, added to the embeddings:
        PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
        PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))
    LearnedPositions(max_positions, d_model)      a trained table, added to the embeddings
    apply_rope(x, positions, layout=...)          Su et al. 2021: rotate each pair of query/key features by
                                                  an angle proportional to the position, so q_m . k_n
                                                  depends on m - n only
    interpolated_positions(seq_len, trained_length)   Chen et al. 2023: squeeze seq_len positions into the
                                                  trained range, m -> m * trained_length / seq_len
    relative_spread(rope, q, k, offset, starts)   how far an encoding's scores are from depending on the
                                                  offset alone: 0 for RoPE
    ntk_aware_base(head_dim, factor)              bloc97 2023: a larger RoPE base, so the slowest pair turns
                                                  factor times slower and the fastest not at all
    alibi_bias(num_heads, query_len, key_len)     Press et al. 2022: add -slope_h * (i - j) to the scores,
                                                  slopes 2^(-8k/num_heads), k = 1..num_heads, for a power
                                                  of two heads (alibi_slopes: the rule for the others)

Positions count from 0 in code. Each public function checks its arguments in one call at its top (the checks are at
the end of this module), then computes; ``_apply_rope`` is the unchecked rotation for callers that checked already.
"""

from __future__ import annotations

import torch
from torch import nn

from ._validate import (
    check_choice,
    check_finite,
    check_float,
    check_min_dims,
    check_number,
    check_positive_int,
    check_tensor,
    describe,
)

ROPE_LAYOUTS = ("halves", "interleaved")


def sinusoidal_encoding(num_positions: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """(num_positions, d_model): row pos is PE(pos); even features sin, odd features cos."""
    num_positions, d_model, base = _check_sinusoidal(num_positions, d_model, base)
    positions = torch.arange(num_positions, dtype=torch.float64)[:, None]
    frequencies = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # 1 / 10000^(2i/d)
    encoding = torch.zeros(num_positions, d_model, dtype=torch.float64)
    encoding[:, 0::2] = torch.sin(positions * frequencies)
    encoding[:, 1::2] = torch.cos(positions * frequencies)
    return encoding.float()


class LearnedPositions(nn.Module):
    """A trained table of ``max_positions`` vectors; forward(seq_len) -> (seq_len, d_model) to add to the embeddings.

    It has nothing to say about a position it never saw: asking for more raises instead of guessing.
    """

    def __init__(self, max_positions: int, d_model: int):
        super().__init__()
        check_positive_int("max_positions", max_positions, "the length of the table")
        check_positive_int("d_model", d_model, "the embedding width")
        self.table = nn.Embedding(max_positions, d_model)
        nn.init.normal_(self.table.weight, std=0.02)

    def forward(self, seq_len: int) -> torch.Tensor:
        _check_learned_positions(self.table.num_embeddings, seq_len)
        return self.table.weight[:seq_len]


def rope_angles(positions: torch.Tensor, head_dim: int, base: float = 10000.0) -> torch.Tensor:
    """(len,) positions -> (len, head_dim / 2) angles: pair i turns by position * base^(-2i / head_dim)."""
    base = _check_rope_angles(positions, head_dim, base)
    return _rope_angles(positions, head_dim, base)


def _rope_angles(positions: torch.Tensor, head_dim: int, base: float) -> torch.Tensor:
    frequencies = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    return positions.to(torch.float64)[:, None] * frequencies


def apply_rope(x: torch.Tensor, positions: torch.Tensor, layout: str = "halves", base: float = 10000.0) -> torch.Tensor:
    """Rotate queries or keys by their positions: x (..., seq_len, head_dim), positions (seq_len,).

    Each pair of features (a, b) becomes (a cos t - b sin t, a sin t + b cos t) with t = position * frequency.
    Which features form a pair is a *layout*, and the two in use are not interchangeable:

    * ``"halves"``: feature i pairs with feature i + head_dim/2 (GPT-NeoX, Llama in Hugging Face);
    * ``"interleaved"``: feature 2i pairs with feature 2i + 1 (the RoFormer paper, GPT-J, Meta's Llama).

    Weights trained with one layout give wrong answers under the other.
    """
    base = _check_apply_rope(x, positions, layout, base)
    return _apply_rope(x, positions, layout, base)


def _apply_rope(x: torch.Tensor, positions: torch.Tensor, layout: str, base: float) -> torch.Tensor:
    """apply_rope on inputs already checked."""
    angles = _rope_angles(positions, x.shape[-1], base)
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)  # (seq_len, head_dim / 2)
    if layout == "halves":
        a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)


def relative_spread(rope, q: torch.Tensor, k: torch.Tensor, offset: int, starts) -> float:
    """How far a position encoding's scores are from depending on the offset alone (lesson 07's RoPE check).

    rope(x (1, head_dim), positions (1,)) -> (1, head_dim) rotates one vector to a position (``apply_rope`` with a
    layout, or a learner's version); q, k: (head_dim,). For every n in ``starts`` the query goes to position
    n + offset and the key to position n, and the score is RoPE(q, n + offset) . RoPE(k, n):

        spread = max_n score(n) - min_n score(n)

    0 (to float rounding) for an encoding whose scores depend on the offset m - n only; above 0 for one that also
    depends on where the pair sits.
    """
    starts = _check_relative_spread(rope, q, k, starts)
    scores = [(rope(q[None], torch.tensor([n + offset])) @ rope(k[None], torch.tensor([n])).T).item() for n in starts]
    return max(scores) - min(scores)


def interpolated_positions(seq_len: int, trained_length: int) -> torch.Tensor:
    """(seq_len,) float: position interpolation (Chen et al. 2023) for RoPE past the trained length.

    Position m becomes m * trained_length / seq_len, so a text of seq_len positions is rotated by angles the model
    saw in training (0 .. trained_length), at fractional positions. Chen et al. then fine-tune briefly (about 1000
    steps) at the new length; without that, the model meets neighbours closer together than it ever saw.
    A seq_len at most the trained length leaves the positions 0, 1, ... unchanged.
    """
    seq_len = check_positive_int("seq_len", seq_len, "the length to encode")
    trained_length = check_positive_int("trained_length", trained_length, "the length the model was trained at")
    positions = torch.arange(seq_len, dtype=torch.float64)
    return positions * (trained_length / seq_len) if seq_len > trained_length else positions


def ntk_aware_base(head_dim: int, factor: float, base: float = 10000.0) -> float:
    """The RoPE base of "NTK-aware" scaling (bloc97 2023; the starting point of YaRN, Peng et al. 2023) for a
    context ``factor`` times the trained one: base * factor^(head_dim / (head_dim - 2)).

    Pair i turns at base^(-2i/head_dim) radians per position. With the new base, pair 0 (the fastest, 1 radian per
    position) is unchanged, so neighbouring positions stay as distinct as in training, and the slowest pair
    (i = head_dim/2 - 1) turns exactly ``factor`` times slower, so the longest distances map back into the angles
    it saw in training; the pairs between are stretched by less the faster they turn.
    """
    head_dim, factor, base = _check_ntk_aware_base(head_dim, factor, base)
    return base * factor ** (head_dim / (head_dim - 2))


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """(num_heads,): one slope m_h per head, by the rule of Press et al.'s reference implementation.

    For a power of two n: the geometric sequence 2^(-8k/n), k = 1..n (n = 8: 1/2, 1/4, ..., 1/256). For any
    other number of heads H, take the n slopes of the closest power of two below it, n = 2^floor(log2 H),
    then the first H - n of every other slope of 2n, which fall between them:

        H = 6:  the 4 slopes of 4 (1/4, 1/16, 1/64, 1/256), then slopes 1, 3 of the 8's (1/2, 1/8)
        H = 12: the 8 slopes of 8 (2^-1 .. 2^-8), then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5 from the 16's

    (The formula 2^(-8k/H) for every H gives other slopes when H is not a power of two: 6 heads would get
    2^-1.33, 2^-2.67, ..., models trained with the reference's slopes would then see biases they never
    learned.)
    """
    num_heads = check_positive_int("num_heads", num_heads, "the number of heads")
    return torch.tensor(_alibi_slopes(num_heads), dtype=torch.float32)


def _alibi_slopes(num_heads: int) -> list[float]:
    if num_heads & (num_heads - 1) == 0:  # a power of two
        return [2.0 ** (-8.0 * k / num_heads) for k in range(1, num_heads + 1)]
    lower = 1 << (num_heads.bit_length() - 1)  # the closest power of two below num_heads
    return _alibi_slopes(lower) + _alibi_slopes(2 * lower)[0::2][: num_heads - lower]


def alibi_bias(num_heads: int, query_len: int, key_len: int | None = None) -> torch.Tensor:
    """(num_heads, query_len, key_len) to add to the scores: -slope_h * (i - j) for key j at or before query i,
    so a head penalises distance linearly, some heads steeply, some gently. Queries are the last query_len
    positions (bottom-right), as in decoding; keys after a query get a positive bias, so pair ALiBi with a
    causal mask."""
    num_heads, query_len, key_len = _check_alibi_bias(num_heads, query_len, key_len)
    query_positions = torch.arange(key_len - query_len, key_len)
    distance = query_positions[:, None] - torch.arange(key_len)[None, :]  # i - j
    slopes = torch.tensor(_alibi_slopes(num_heads), dtype=torch.float32)  # alibi_slopes(num_heads)
    return -slopes[:, None, None] * distance[None].float()


def encoding_similarity(encoding: torch.Tensor) -> torch.Tensor:
    """(positions, d_model) -> (positions, positions): PE(i) . PE(j) / d_model, for the heat maps of lesson 07."""
    check_tensor("encoding", encoding, 2, "(num_positions, d_model)")
    check_float("encoding", encoding)
    return encoding @ encoding.T / encoding.shape[1]


# --------------------------------------------------------------------------------------------
# Input checks (each public function above calls its own first; one form of message: attnedu._validate)
# --------------------------------------------------------------------------------------------


def _check_sinusoidal(num_positions, d_model, base) -> tuple[int, int, float]:
    num_positions = check_positive_int("num_positions", num_positions, "how many positions to encode")
    d_model = check_positive_int("d_model", d_model, "the embedding width")
    base = check_number("base", base, "the wavelength base", 1.0, strict=True)
    if d_model % 2:
        raise ValueError(
            f"d_model should be even, got d_model={d_model}, which is odd, but the sinusoidal encoding pairs "
            "features (a sin and a cos per "
            "frequency); use an even d_model"
        )
    return num_positions, d_model, base


def _check_learned_positions(rows: int, seq_len) -> None:
    check_positive_int("seq_len", seq_len, "the sequence length")
    if seq_len > rows:
        raise ValueError(
            f"a learned position table of {rows} rows has no vector for position "
            f"{rows} or later (asked for {seq_len}); train with longer sequences or use an "
            "encoding defined for every position (sinusoidal, RoPE, ALiBi)"
        )


def _check_rope_angles(positions, head_dim, base) -> float:
    check_tensor("positions", positions, 1, "(seq_len,)")
    if positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(f"positions should be numbers (counted from 0), got dtype {positions.dtype}; use torch.arange")
    check_finite("positions", positions.double())
    head_dim = check_positive_int("head_dim", head_dim, "features per head")
    base = check_number("base", base, "the wavelength base", 1.0, strict=True)
    if head_dim % 2:
        raise ValueError(
            f"head_dim should be even (RoPE rotates pairs of features, so head_dim must be even), got {head_dim}"
        )
    return base


def _check_apply_rope(x, positions, layout, base) -> float:
    check_min_dims("x", x, 2, "(..., seq_len, head_dim)")
    check_float("x", x)
    check_choice("layout", layout, ROPE_LAYOUTS)
    check_tensor("positions", positions, 1, "(seq_len,)")
    if positions.shape != (x.shape[-2],):
        raise ValueError(
            f"positions should give one position per row of x, shape ({x.shape[-2]},), got {describe(positions)}; "
            "for x (..., seq_len, head_dim) pass torch.arange(seq_len)"
        )
    return _check_rope_angles(positions, x.shape[-1], base)


def _check_relative_spread(rope, q, k, starts) -> list:
    check_tensor("q", q, 1, "(head_dim,), one query vector")
    check_tensor("k", k, 1, "(head_dim,), one key vector")
    if not callable(rope):
        raise TypeError(f"rope should be a function rope(x, positions), got {describe(rope)}")
    starts = list(starts)
    if not starts:
        raise ValueError("starts should hold at least one position, got none; e.g. range(0, 300, 23)")
    return starts


def _check_ntk_aware_base(head_dim, factor, base) -> tuple[int, float, float]:
    head_dim = check_positive_int("head_dim", head_dim, "features per head")
    if head_dim < 4 or head_dim % 2:
        raise ValueError(f"head_dim should be even and at least 4 (two pairs or more), got {head_dim}")
    factor = check_number("factor", factor, "how many times the trained length", 1.0)
    base = check_number("base", base, "the wavelength base", 1.0, strict=True)
    return head_dim, factor, base


def _check_alibi_bias(num_heads, query_len, key_len) -> tuple[int, int, int]:
    num_heads = check_positive_int("num_heads", num_heads, "the number of heads")
    query_len = check_positive_int("query_len", query_len, "the number of queries")
    key_len = query_len if key_len is None else check_positive_int("key_len", key_len, "the number of keys")
    if query_len > key_len:
        raise ValueError(
            f"query_len should be at most key_len={key_len} (the queries are the last query_len of the keys' "
            f"positions), got {query_len}; pass key_len >= query_len"
        )
    return num_heads, query_len, key_len
