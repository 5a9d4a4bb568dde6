"""Checks for the exercises of lesson 02 (Bahdanau attention).

Every exercise has test cases with a batch of one, with and without padding, and with large inputs
(scores, or the tanh's argument, in the hundreds, where exp overflows in float32); the known-wrong
variants include an off-by-one in both directions (an index, or the axis of a reduction one too low
and one too high, with a case whose sizes let the wrong axis run). Sizes differ from each other so
that a transpose shows. masked_softmax also has a case with a NaN score at a position the mask allows: the row
must come out NaN, so that replacing every NaN by 0 (which also hides a bug) does not pass for zeroing the fully
masked rows.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import torch
from torch import nn

from ..attention import AdditiveAttention, additive_score, context_vector, masked_softmax
from ..masks import padding_mask
from ..models import BahdanauDecoder, EncoderOutput
from .exercise import (
    EMPTY_ROW,
    LARGE,
    NAN_INPUT,
    ONE,
    PADDED,
    UNPADDED,
    Case,
    Exercise,
    Layout,
    Variant,
    bool_mask,
    explicit_weights,
    generator,
    kinds,
    randn,
)
from .mistakes import MASKED_AFTER_SOFTMAX, MASKED_WITH_ZERO, TRANSPOSED_SCORES

LESSON = "02_bahdanau_attention"

# --------------------------------------------------------------------------------------------
# additive_score
# --------------------------------------------------------------------------------------------


def _additive_score_cases() -> list[Case]:
    g = generator(3)

    def weights(dec_dim: int, enc_dim: int, attn_dim: int) -> tuple:
        return randn(g, attn_dim, dec_dim), randn(g, attn_dim, enc_dim), randn(g, attn_dim)

    def case(sizes: tuple[int, ...], tags, lengths: list[int] | None = None) -> Case:
        batch, src_len, dec_dim, enc_dim, attn_dim = sizes
        keys = randn(g, batch, src_len, enc_dim)
        note = ""
        if lengths is not None:  # zeros at padded positions, as pad_packed_sequence leaves them
            keys = keys * padding_mask(torch.tensor(lengths), src_len)[:, :, None]
            note = f"lengths {lengths}, zero keys at padding (scored like any position: masking comes later)"
        W_a, U_a, v_a = weights(dec_dim, enc_dim, attn_dim)
        description = f"batch {batch}, src_len {src_len}, dec_dim {dec_dim}, enc_dim {enc_dim}, attn_dim {attn_dim}"
        return Case(description + (f"; {note}" if note else ""), (randn(g, batch, dec_dim), keys, W_a, U_a, v_a), tags)

    # Large: U_a h_j is chosen between 100 and 1000 in size, of either sign, and W_a s is small, so every tanh
    # argument is large: tanh is ±1, and a tanh written with exp overflows.
    W_a, U_a, v_a = weights(2, 4, 3)
    sign = torch.where(torch.rand(2, 5, 3, generator=g) < 0.5, -1.0, 1.0)
    projected_keys = (100 + 900 * torch.rand(2, 5, 3, generator=g)) * sign  # (batch, src_len, attn_dim)
    large = Case(
        "batch 2, src_len 5, dec_dim 2, enc_dim 4, attn_dim 3; W_a s + U_a h_j between 100 and 1000 in size",
        (0.1 * randn(g, 2, 2), projected_keys @ torch.linalg.pinv(U_a).T, W_a, U_a, v_a),
        kinds(LARGE, UNPADDED),
    )
    # The first case is square (batch = src_len = every dim), so that every known-wrong variant runs on it, even
    # those that need two sizes to be equal; the others have sizes that differ, so that a transpose shows.
    return [
        case((4, 4, 4, 4, 4), kinds(UNPADDED)),
        case((3, 4, 3, 6, 5), kinds(PADDED), lengths=[4, 2, 3]),
        case((1, 3, 2, 3, 2), kinds(ONE, UNPADDED)),
        case((1, 4, 3, 2, 5), kinds(ONE, PADDED), lengths=[2]),
        case((2, 5, 4, 6, 3), kinds(UNPADDED)),
        large,
    ]


def _score_parts(query, keys, W_a, U_a):
    return (query @ W_a.T)[:, None, :], keys @ U_a.T  # (batch, 1, attn_dim), (batch, src_len, attn_dim)


def _score_layout(args: tuple) -> tuple[Layout]:
    return (Layout(positions=1),)


ADDITIVE_SCORE = Exercise(
    name="additive_score",
    lesson=LESSON,
    params=("query", "keys", "W_a", "U_a", "v_a"),
    returns=(("batch", "src_len"),),
    reference=additive_score,
    make_cases=_additive_score_cases,
    gradients=True,  # it takes part in training: gradients must flow through it
    layout=_score_layout,
    variants=(
        Variant(
            "the tanh is missing: your scores are v_a^T (W_a s + U_a h_j), but e_j = v_a^T tanh(W_a s + U_a h_j). "
            "Without the tanh the score is linear in h_j.",
            lambda q, k, W, U, v: (sum(_score_parts(q, k, W, U))) @ v,
        ),
        Variant(
            "your output is the softmax of the scores: this function returns the raw scores e_j. The softmax "
            "comes in the next exercise (masked_softmax), where the padding mask is applied first.",
            lambda q, k, W, U, v: torch.softmax(additive_score(q, k, W, U, v), dim=-1),
        ),
        Variant(
            "your scores are the plain sum of the attn_dim features of tanh(W_a s + U_a h_j), not their dot product "
            "with v_a: v_a weighs each feature before they are added up.",
            lambda q, k, W, U, v: torch.tanh(sum(_score_parts(q, k, W, U))).sum(-1),
        ),
        Variant(
            "W_a and U_a are swapped: your scores project the query with U_a and the keys with W_a (it runs only when "
            "dec_dim equals enc_dim). W_a multiplies the decoder state s (the query) and U_a the encoder annotations "
            "h_j (the keys).",
            lambda q, k, W, U, v: additive_score(q, k, U, W, v),
        ),
        Variant(
            TRANSPOSED_SCORES,
            lambda q, k, W, U, v: additive_score(q, k, W, U, v).T,
        ),
        Variant(
            "your scores are those with W_a^T and U_a^T in place of W_a and U_a (it runs only when attn_dim equals "
            "dec_dim and enc_dim). W_a is (attn_dim, dec_dim), and here vectors are rows: the row s meets W_a "
            "transposed, (dec_dim, attn_dim), to give W_a s, with attn_dim features.",
            lambda q, k, W, U, v: additive_score(q, k, W.T, U.T, v),
        ),
        Variant(
            "the tanh is applied after v_a: the formula is v_a^T tanh(W_a s + U_a h_j), tanh first, then the "
            "dot product with v_a.",
            lambda q, k, W, U, v: torch.tanh(sum(_score_parts(q, k, W, U)) @ v),
        ),
        Variant(
            "source position j of every sentence was scored with sentence j's query: the projected query's batch axis "
            "met the keys' source axis, one axis too late (as when the query's new axis goes in front, or it gets "
            "none; it runs only when batch equals src_len). The projected query needs an axis of size 1 for the "
            "source positions right after the batch, so that every position of a sentence meets that sentence's "
            "query.",
            lambda q, k, W, U, v: torch.tanh((q @ W.T)[None, :, :] + k @ U.T) @ v,
        ),
        Variant(
            "the projected query's features met the keys' source axis, one axis too early (its new axis went last: "
            "(batch, attn_dim, 1), which runs only when src_len equals attn_dim), so features and positions got "
            "mixed. The projected query needs an axis of size 1 for the source positions right after the batch: "
            "(batch, 1, attn_dim).",
            lambda q, k, W, U, v: torch.tanh((q @ W.T)[:, :, None] + k @ U.T) @ v,
        ),
    ),
    hint=(
        "Project the query once and every key once, add them (the query's projection is the same for every source "
        "position), squash with tanh, and reduce to one number per position with v_a.",
        "With rows as vectors, W_a s is `query @ W_a.T`, (batch, attn_dim), and U_a h_j for every j is `keys @ "
        "U_a.T`, (batch, src_len, attn_dim). Give the first a source axis, `[:, None, :]`, so that they add.",
        "`return torch.tanh((query @ W_a.T)[:, None, :] + keys @ U_a.T) @ v_a`.",
    ),
)

# --------------------------------------------------------------------------------------------
# masked_softmax
# --------------------------------------------------------------------------------------------


def _masked_softmax_cases() -> list[Case]:
    g = generator(4)
    large_scores = torch.stack([500 + 2 * randn(g, 5), -500 + 2 * randn(g, 5)])
    return [
        Case(
            "4 rows of 4 scores, some positions masked",
            (2 * randn(g, 4, 4), bool_mask([[1, 1, 1, 1], [1, 1, 1, 0], [0, 1, 1, 0], [1, 0, 0, 0]])),
            kinds(PADDED),
        ),
        Case(
            "2 rows of 4 scores; row 1 is fully masked, so its weights must be all zeros",
            (2 * randn(g, 2, 4), bool_mask([[1, 1, 1, 0], [0, 0, 0, 0]])),
            kinds(PADDED, EMPTY_ROW),
        ),
        Case("one row of 3 scores, nothing masked", (2 * randn(g, 1, 3), bool_mask([[1, 1, 1]])), kinds(ONE, UNPADDED)),
        Case(
            "one row of 6 scores, the last 2 masked",
            (2 * randn(g, 1, 6), bool_mask([[1, 1, 1, 1, 0, 0]])),
            kinds(ONE, PADDED),
        ),
        Case(
            "3 rows of 5 scores, nothing masked",
            (2 * randn(g, 3, 5), torch.ones(3, 5, dtype=torch.bool)),
            kinds(UNPADDED),
        ),
        Case(
            "2 rows of 5 scores, around +500 and -500, where exp overflows (or underflows to 0), some masked",
            (large_scores, bool_mask([[1, 1, 1, 1, 0], [1, 1, 0, 1, 1]])),
            kinds(LARGE, PADDED),
        ),
        _nan_case(g),  # drawn after the other cases, so that adding it changed none of theirs
    ]


def _nan_case(g: torch.Generator) -> Case:
    """A NaN score at a position the mask allows, as a bug upstream would leave: the row must come out NaN (a bug must
    show). At a masked position, or in a fully masked row, the mask would hide it and nothing would tell a function
    that replaces every NaN by 0 from one that zeroes only the fully masked rows."""
    scores = 2 * randn(g, 2, 4)
    scores[0, 1] = float("nan")
    return Case(
        "2 rows of 4 scores, the last of row 1 masked; row 0 has a NaN score at a position the mask allows, as a bug "
        "upstream would leave: its weights must come out NaN (a bug must show), row 1's right",
        (scores, bool_mask([[1, 1, 1, 1], [1, 1, 1, 0]])),
        kinds(PADDED, NAN_INPUT),
    )


def _softmax_filled(scores, mask, fill, dim=-1):
    return torch.softmax(scores.masked_fill(mask, fill), dim=dim)


def _emptied(weights, mask, dim=-1):
    """``weights`` with the rows (along ``dim``) where ``mask`` allows nothing set to 0: the way the reference
    treats the NaN of a fully masked row, kept by a learner whose mistake is elsewhere (where ``dim`` is the axis
    of their softmax, it is the wrong axis too). A NaN from elsewhere stays, where every NaN replaced would hide
    it: the two differ on the test case with a NaN score."""
    return weights.masked_fill(~mask.any(dim=dim, keepdim=True), 0.0)


def _softmax_properties(args: tuple, got) -> str | None:
    """Masked weights are exactly zero; rows sum to one (or to zero when fully masked)."""
    _, mask = args
    if not isinstance(got, torch.Tensor) or got.shape != mask.shape or not got.is_floating_point():
        return None
    if not bool(torch.isfinite(got).all()):
        return None  # the message about NaN and inf says more
    if bool((got[~mask] != 0).any()):
        return "masked positions must get exactly zero weight, and some of yours do not."
    sums = got.sum(dim=-1)
    open_rows = mask.any(dim=-1)
    if bool(torch.isfinite(sums).all()) and not torch.allclose(
        sums[open_rows], torch.ones_like(sums[open_rows]), atol=1e-4
    ):
        listed = ", ".join(f"{x:.4g}" for x in sums.tolist())
        return (
            f"each row's weights must sum to one over the source positions (0 if fully masked); yours sum to {listed}."
        )
    return None


def _softmax_layout(args: tuple) -> tuple[Layout]:
    _, mask = args
    return (Layout(positions=1, real=mask, words=("positions the mask allows", "masked positions")),)


def _sum_without_keepdim(shift_by_row: bool, empty_rows: bool = False):
    """e / e.sum(dim=-1) without keepdim, e = exp(masked scores - their max: per row, or over everything); then
    every NaN replaced by 0, or (``empty_rows``) the rows with nothing to attend set to 0."""

    def softmax(scores, mask):
        shift = scores.max(dim=-1, keepdim=True).values if shift_by_row else scores.max()
        e = torch.exp(scores.masked_fill(~mask, float("-inf")) - shift)
        return _emptied(e / e.sum(dim=-1), mask) if empty_rows else (e / e.sum(dim=-1)).nan_to_num(0.0)

    return softmax


_WRONG_ROW_SUM = (
    "each row was divided by the wrong row's sum: column j was divided by the sum of row j, as a sum over the last "
    "axis that drops that axis does (its shape (batch,) broadcasts against the last axis of (batch, src_len); this "
    "runs only when batch equals src_len). Each row is divided by its own sum, which needs the summed axis kept: "
    "(batch, 1)."
)


MASKED_SOFTMAX = Exercise(
    name="masked_softmax",
    lesson=LESSON,
    params=("scores", "mask"),
    returns=(("batch", "src_len"),),
    reference=masked_softmax,
    make_cases=_masked_softmax_cases,
    gradients=True,  # it takes part in training: gradients must flow through it
    layout=_softmax_layout,
    variants=(
        Variant(
            "softmax over the wrong axis (dim=0, across the batch): each source position's weights sum to one over "
            "the sentences instead. Each sentence's weights are a distribution over its own source positions, the "
            "last axis.",
            lambda s, m: _softmax_filled(s, ~m, float("-inf"), dim=0).nan_to_num(0.0),
            lambda s, m: _softmax_filled(s, ~m, float("-inf"), dim=0),
            lambda s, m: _emptied(_softmax_filled(s, ~m, float("-inf"), dim=0), m),
            lambda s, m: _emptied(_softmax_filled(s, ~m, float("-inf"), dim=0), m, dim=0),
            lambda s, m: torch.softmax(s, dim=0),
        ),
        Variant(
            _WRONG_ROW_SUM,
            _sum_without_keepdim(shift_by_row=True),
            _sum_without_keepdim(shift_by_row=False),
            _sum_without_keepdim(shift_by_row=True, empty_rows=True),
            _sum_without_keepdim(shift_by_row=False, empty_rows=True),
        ),
        Variant(
            "the mask is inverted: the real positions got zero weight and the masked ones got all of it. True means "
            "'may attend': the scores to hide are those where the mask is False.",
            lambda s, m: _softmax_filled(s, m, float("-inf")).nan_to_num(0.0),
            lambda s, m: _softmax_filled(s, m, float("-inf")),
            lambda s, m: _emptied(_softmax_filled(s, m, float("-inf")), m),
        ),
        Variant(
            "your weights are the softmax without the mask: masked positions get weight, and each row with masked "
            "positions shares its weight with them. A masked score must be -inf before the softmax, so that its "
            "weight is exactly 0.",
            lambda s, m: torch.softmax(s, dim=-1),
        ),
        Variant(
            MASKED_WITH_ZERO,
            lambda s, m: _softmax_filled(s, ~m, 0.0),
        ),
        Variant(
            MASKED_AFTER_SOFTMAX,
            lambda s, m: torch.softmax(s, dim=-1) * m,
        ),
        Variant(
            "a fully masked row gives NaN (0/0: nothing is left to share the weight), and everything else is right. "
            "Such a row must give all zeros. Which rows they are is known from the mask (a row that is all False), "
            "not from the NaN: replacing every NaN would also hide one that came from a bug.",
            lambda s, m: _softmax_filled(s, ~m, float("-inf")),
        ),
        Variant(
            "every NaN became 0, not only those of the fully masked rows: in the test case whose row 0 has a NaN "
            "score at a position the mask allows, that row's weights came out 0 where the reference's are NaN, and "
            "everything else is right. A NaN there is the sign of a bug upstream; turned into zeros it would pass "
            "for an answer and training would go on with it. Only the rows whose mask is all False may be set to 0, "
            "found from the mask, not from the values.",
            lambda s, m: _softmax_filled(s, ~m, float("-inf")).nan_to_num(0.0),
        ),
        Variant(
            "a fully masked row gets uniform weights, as when the masked scores are a large negative number such as "
            "-1e9, which is still finite: with every score in the row equal, each position gets the same share. A row "
            "with nothing to attend to must give all zeros (masked scores -inf, then the rows where the mask is all "
            "False set to 0).",
            lambda s, m: _softmax_filled(s, ~m, -1e9),
        ),
    ),
    hint=(
        "Mask the scores before the softmax, not the weights after it: a masked score of -inf gets exactly 0 "
        "weight, and the real words share all of it. Then think about a row with no real word at all.",
        "`scores.masked_fill(~mask, float('-inf'))` makes a masked copy (True = real word); `torch.softmax(..., "
        "dim=-1)` over the source axis. A fully masked row comes out as NaN (0/0): zero exactly those rows, found "
        "with `mask.any(dim=-1, keepdim=True)`, not every NaN (`nan_to_num` would hide a real bug).",
        "`weights = torch.softmax(scores.masked_fill(~mask, float('-inf')), dim=-1)`; `return "
        "weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)`.",
    ),
    properties=_softmax_properties,
)

# --------------------------------------------------------------------------------------------
# context_vector
# --------------------------------------------------------------------------------------------


def _context_vector_cases() -> list[Case]:
    g = generator(5)

    def weights(lengths: list[int], src_len: int) -> torch.Tensor:
        return masked_softmax(randn(g, len(lengths), src_len), padding_mask(torch.tensor(lengths), src_len))

    peaked = torch.softmax(8 * torch.nn.functional.one_hot(torch.tensor([2, 0, 3]), 4) + randn(g, 3, 4), dim=-1)
    return [
        Case(
            "batch 2, src_len 5, enc_dim 3, padding in sentence 1",
            (weights([5, 3], 5), randn(g, 2, 5, 3)),
            kinds(PADDED),
        ),
        Case(
            "batch 3, src_len 4, enc_dim 6, each row's weight almost all on one position",
            (peaked, randn(g, 3, 4, 6)),
            kinds(UNPADDED),
        ),
        Case("batch 1, src_len 3, enc_dim 2", (weights([3], 3), randn(g, 1, 3, 2)), kinds(ONE, UNPADDED)),
        Case("batch 1, src_len 4, enc_dim 5, length 2", (weights([2], 4), randn(g, 1, 4, 5)), kinds(ONE, PADDED)),
        Case("batch 3, src_len 3, enc_dim 5", (weights([3, 3, 3], 3), randn(g, 3, 3, 5)), kinds(UNPADDED)),
        Case(
            "batch 2, src_len 4, enc_dim 3, lengths [4, 3], values around ±1000",
            (weights([4, 3], 4), 1000 * randn(g, 2, 4, 3)),
            kinds(LARGE, PADDED),
        ),
    ]


CONTEXT_VECTOR = Exercise(
    name="context_vector",
    lesson=LESSON,
    params=("weights", "values"),
    returns=(("batch", "enc_dim"),),
    reference=context_vector,
    make_cases=_context_vector_cases,
    gradients=True,  # it takes part in training: gradients must flow through it
    variants=(
        Variant(
            "your output is the plain mean of the states, without the weights. The context is the weighted sum "
            "c = sum_j alpha_j h_j.",
            lambda w, v: v.mean(dim=1),
        ),
        Variant(
            "your output is the plain sum of the states, without the weights. The context is the weighted sum "
            "c = sum_j alpha_j h_j.",
            lambda w, v: v.sum(dim=1),
        ),
        Variant(
            "your output sums the weighted states over the wrong axis (the enc_dim features, dim 2, one too high). "
            "The sum runs over source "
            "positions j: dim 1 of (batch, src_len, enc_dim).",
            lambda w, v: (w[:, :, None] * v).sum(dim=2),
        ),
        Variant(
            "your output sums the weighted states over the wrong axis (the batch, dim 0, one too low). The sum runs "
            "over source positions j: "
            "dim 1 of (batch, src_len, enc_dim).",
            lambda w, v: (w[:, :, None] * v).sum(dim=0),
        ),
        Variant(
            "the output is transposed: (enc_dim, batch) instead of (batch, enc_dim). Keep the batch first.",
            lambda w, v: context_vector(w, v).T,
        ),
        Variant(
            "your output is the matrix product of the 2-D weights with the values, which broadcasts over the batch: "
            "every sentence's weights meet every sentence's states, (batch, batch, enc_dim). Each sentence's weights "
            "must meet only that sentence's states, one context per sentence: (batch, enc_dim).",
            lambda w, v: w @ v,
        ),
        Variant(
            "the output has an extra dimension of size 1: (batch, 1, enc_dim), the row axis that a matrix product of "
            "(batch, 1, src_len) weights keeps. The context is one vector per sentence, (batch, enc_dim).",
            lambda w, v: w[:, None, :] @ v,
        ),
        Variant(
            "your output is the state with the largest weight (hard attention). The context is the weighted average "
            "of all states.",
            lambda w, v: v[torch.arange(v.shape[0]), w.argmax(dim=1)],
        ),
    ),
    hint=(
        "For each sentence, a weighted sum of its values over the source positions: one weight per position, the "
        "whole vector h_j multiplied by it.",
        "`weights` is (batch, src_len) and `values` (batch, src_len, enc_dim): give the weights a trailing axis, "
        "`weights[:, :, None]`, so that they broadcast over the features; multiply, then sum over the source axis.",
        "`return (weights[:, :, None] * values).sum(dim=1)`, or `(weights[:, None, :] @ values)[:, 0]`.",
    ),
)

# --------------------------------------------------------------------------------------------
# decoder_step
# --------------------------------------------------------------------------------------------


def _decoder_step_reference(embedded, state, annotations, mask, attention, cell, out):
    """One Bahdanau decoder step, by the package's own BahdanauDecoder.advance and BahdanauDecoder.readout."""
    parts = SimpleNamespace(attention=attention, cell=cell, out=out)
    memory = EncoderOutput(annotations, summary=annotations[:, 0], mask=mask)  # summary unused with attention
    new_state, context, weights = BahdanauDecoder.advance(parts, embedded, state, memory)
    return BahdanauDecoder.readout(parts, new_state, context, embedded), new_state, weights


def _decoder_step_cases() -> list[Case]:
    g = generator(6)

    def case(sizes: tuple[int, ...], lengths: list[int], tags, scale: float = 1.0, note: str = "") -> Case:
        batch, src_len, emb, hidden, enc = sizes
        with torch.random.fork_rng(devices=[]):  # module constructors draw from the global RNG: leave it as it was
            attention = AdditiveAttention(hidden, enc, attn_dim=5)
            cell = nn.GRUCell(emb + enc, hidden)
            out = nn.Linear(hidden + enc + emb, 7)
        explicit_weights(g, attention, cell, out, scale=0.5)  # v_a nonzero, so the attention is not uniform
        with torch.no_grad():
            attention.v_a.mul_(scale)
        args = (
            randn(g, batch, emb),
            randn(g, batch, hidden),
            scale * randn(g, batch, src_len, enc),
            padding_mask(torch.tensor(lengths), src_len),
            attention,
            cell,
            out,
        )
        padding = "no padding" if min(lengths) == src_len else f"lengths {lengths}"
        description = f"batch {batch}, src_len {src_len}, emb_dim {emb}, hidden_dim {hidden}, enc_dim {enc}, {padding}"
        return Case(description + (f"; {note}" if note else ""), args, tags)

    return [
        case((3, 4, 4, 4, 4), [4, 2, 3], kinds(PADDED)),
        case((2, 5, 3, 6, 8), [5, 2], kinds(PADDED)),
        case((1, 3, 2, 3, 5), [3], kinds(ONE, UNPADDED)),
        case((1, 6, 3, 2, 4), [4], kinds(ONE, PADDED)),
        case((2, 3, 5, 4, 3), [3, 3], kinds(UNPADDED)),
        case(
            (2, 5, 3, 4, 6),
            [5, 3],
            kinds(LARGE, PADDED),
            scale=100.0,
            note="annotations and v_a 100 times larger, so the attention scores are in the hundreds",
        ),
    ]


def _luong_order(embedded, state, annotations, mask, attention, cell, out):
    context, _ = attention(state, annotations, mask)
    new_state = cell(torch.cat([embedded, context], dim=-1), state)
    context, weights = attention(new_state, annotations, mask)
    return out(torch.cat([new_state, context, embedded], dim=-1)), new_state, weights


def _step_with(gru_input, readout_input, returned_state="new", use_mask=True):
    """A decoder step whose GRU input and readout input are built by the given functions of (e, s, s_t, c)."""

    def step(embedded, state, annotations, mask, attention, cell, out):
        context, weights = attention(state, annotations, mask if use_mask else None)
        new_state = cell(gru_input(embedded, state, None, context), state)
        logits = out(readout_input(embedded, state, new_state, context))
        return logits, (new_state if returned_state == "new" else state), weights

    return step


def _cat(*picks):
    return lambda e, s, s_t, c: torch.cat([{"e": e, "s": s, "s_t": s_t, "c": c}[p] for p in picks], dim=-1)


_READOUT_ORDER = (
    "the output layer's input is concatenated in the wrong order. The output layer was built for [s_t; c_t; E "
    "y_{t-1}], the new state's features first, then the context's, then the embedding's: it reads whatever sits in "
    "those columns."
)


def _step_layout(args: tuple) -> tuple[Layout | None, ...]:
    mask = args[3]
    return None, None, Layout(positions=1, real=mask, words=("real source positions", "padding positions"))


DECODER_STEP = Exercise(
    name="decoder_step",
    lesson=LESSON,
    params=("embedded", "state", "annotations", "mask", "attention", "cell", "out"),
    returns=(("batch", "vocab"), ("batch", "hidden_dim"), ("batch", "src_len")),
    reference=_decoder_step_reference,
    make_cases=_decoder_step_cases,
    gradients=True,  # it takes part in training: gradients must flow through it
    output_names=("logits", "new_state", "weights"),
    layout=_step_layout,
    variants=(
        Variant(
            "one step late: the context used for the output comes from the new state s_t (Luong's order). In "
            "Bahdanau's decoder the context c_t is computed once, from the previous state s_{t-1}, before the GRU "
            "update, and the same c_t feeds both the GRU and the output layer.",
            _luong_order,
        ),
        Variant(
            "the GRU input is concatenated in the wrong order. The cell was built for [E y_{t-1}; c_t]: the embedding "
            "first, then the context.",
            _step_with(_cat("c", "e"), _cat("s_t", "c", "e")),
        ),
        *(
            Variant(_READOUT_ORDER, _step_with(_cat("e", "c"), _cat(*order)))
            for order in itertools.permutations(("s_t", "c", "e"))
            if order != ("s_t", "c", "e")
        ),
        Variant(
            "one step early: the output layer reads the previous state s_{t-1}. Predict y_t from the new state: "
            "[s_t; c_t; E y_{t-1}].",
            _step_with(_cat("e", "c"), _cat("s", "c", "e")),
        ),
        Variant(
            "the state you returned is the previous state s_{t-1}. Return the new state s_t that the GRU cell "
            "computed: the next step starts from it.",
            _step_with(_cat("e", "c"), _cat("s_t", "c", "e"), returned_state="old"),
        ),
        Variant(
            "the attention gives weight to padding (your weights at the padding positions are not 0), as it does when "
            "it is called without the mask. The padding mask is an argument of the attention module.",
            _step_with(_cat("e", "c"), _cat("s_t", "c", "e"), use_mask=False),
        ),
        Variant(
            "the GRU input has the previous state where the context c_t belongs. The input is "
            "[E y_{t-1}; c_t]; the state goes in as the cell's second argument.",
            _step_with(_cat("e", "s"), _cat("s_t", "c", "e")),
        ),
    ),
    hint=(
        "Bahdanau's order: attend first, from the previous state s_{t-1}, then update the state with the context, "
        "then predict. Which state does the attention get, the old or the new?",
        "`context, weights = attention(state, annotations, mask)`; the GRU cell reads [E y_{t-1}; c_t], "
        "`torch.cat([embedded, context], -1)`, with the old state; the output layer reads [s_t; c_t; E y_{t-1}].",
        "`context, weights = attention(state, annotations, mask)`; `new_state = cell(torch.cat([embedded, context], "
        "-1), state)`; `return out(torch.cat([new_state, context, embedded], -1)), new_state, weights`.",
    ),
)

# --------------------------------------------------------------------------------------------
# coverage: a metric computed from attention weights, with padding on the target side (not in the lesson)
# --------------------------------------------------------------------------------------------


def _coverage(weights: torch.Tensor, src_lengths: torch.Tensor, tgt_lengths: torch.Tensor) -> torch.Tensor:
    """How much attention each source word received over a whole translation.

    weights (batch, tgt_len, src_len): alpha_tj at every decoder step t; src_lengths, tgt_lengths (batch,)
    -> (batch, src_len): coverage_j = sum over the real target steps t < tgt_length of alpha_tj, 0 at padded
    source positions. Padded target rows are ignored whatever they hold.
    """
    real_steps = padding_mask(tgt_lengths, weights.shape[1])  # (batch, tgt_len)
    real_words = padding_mask(src_lengths, weights.shape[2])  # (batch, src_len)
    total = weights.masked_fill(~real_steps[:, :, None], 0.0).sum(dim=1)
    return total.masked_fill(~real_words, 0.0)


def _coverage_cases() -> list[Case]:
    g = generator(8)

    def weights(src_lengths, tgt_lengths, src_len, tgt_len, junk: float = 3.0, mask_source: bool = True):
        """Real target rows: a softmax over the source (masked unless told otherwise); padded rows: junk."""
        batch = len(src_lengths)
        src_mask = padding_mask(torch.tensor(src_lengths), src_len)[:, None, :].expand(batch, tgt_len, src_len)
        real = masked_softmax(2 * randn(g, batch, tgt_len, src_len), src_mask if mask_source else None)
        junk_rows = junk * (2 * torch.rand(batch, tgt_len, src_len, generator=g) - 1)
        steps = padding_mask(torch.tensor(tgt_lengths), tgt_len)[:, :, None]
        return torch.where(steps, real, junk_rows)

    def case(src_lengths, tgt_lengths, src_len, tgt_len, tags, note: str = "", **kw) -> Case:
        w = weights(src_lengths, tgt_lengths, src_len, tgt_len, **kw)
        batch = len(src_lengths)
        padded = min(src_lengths) < src_len or min(tgt_lengths) < tgt_len
        description = f"batch {batch}, tgt_len {tgt_len}, src_len {src_len}, " + (
            f"target lengths {tgt_lengths}, source lengths {src_lengths}" if padded else "no padding"
        )
        return Case(
            description + (f"; {note}" if note else ""), (w, torch.tensor(src_lengths), torch.tensor(tgt_lengths)), tags
        )

    return [
        case([5, 3, 4], [4, 2, 3], src_len=5, tgt_len=4, tags=kinds(PADDED)),
        case([3, 3], [3, 3], src_len=3, tgt_len=3, tags=kinds(UNPADDED)),
        case([2], [3], src_len=4, tgt_len=5, tags=kinds(ONE, PADDED)),
        case([6], [2], src_len=6, tgt_len=2, tags=kinds(ONE, UNPADDED)),
        case(
            [2, 5],
            [3, 4],
            src_len=5,
            tgt_len=4,
            tags=kinds(PADDED),
            mask_source=False,
            note="the weights come from an attention that did not mask the source, so real rows also weigh padded "
            "source positions: coverage is 0 there all the same",
        ),
        case(
            [90, 100],
            [150, 61],
            src_len=100,
            tgt_len=150,
            tags=kinds(LARGE, PADDED),
            junk=10_000.0,
            note="padded target rows hold numbers up to ±10 000",
        ),
    ]


def _steps_below(weights: torch.Tensor, limit: torch.Tensor) -> torch.Tensor:
    """weights with the target rows t >= limit[b] set to 0 (limit may be outside 0..tgt_len)."""
    keep = torch.arange(weights.shape[1])[None, :] < limit[:, None]
    return weights.masked_fill(~keep[:, :, None], 0.0)


def _source_below(total: torch.Tensor, limit: torch.Tensor) -> torch.Tensor:
    keep = torch.arange(total.shape[-1])[None, :] < limit[:, None]
    return total.masked_fill(~keep, 0.0)


def _coverage_layout(args: tuple) -> tuple[Layout]:
    weights, src_lengths, _ = args
    real = padding_mask(src_lengths, weights.shape[2])
    return (Layout(positions=1, real=real, words=("real source positions", "padded source positions")),)


COVERAGE = Exercise(
    name="coverage",
    lesson=LESSON,
    params=("weights", "src_lengths", "tgt_lengths"),
    returns=(("batch", "src_len"),),
    reference=_coverage,
    make_cases=_coverage_cases,
    layout=_coverage_layout,
    variants=(
        Variant(
            "the padded target rows were counted: your output sums every row of weights, but the rows at t >= "
            "tgt_lengths[b] are padding and may hold anything (the case whose padded rows hold numbers up to ±10 000 "
            "shows it). Only each sentence's real steps count.",
            lambda w, s, t: w.sum(dim=1),
            lambda w, s, t: _source_below(w.sum(dim=1), s),
        ),
        Variant(
            "your output sums over the source axis (dim 2, one too high), which gives the total weight of each target "
            "step. Coverage sums over the target steps, dim 1 of (batch, tgt_len, src_len), one value per source "
            "word.",
            lambda w, s, t: _steps_below(w, t).sum(dim=2),
            lambda w, s, t: w.sum(dim=2),
        ),
        Variant(
            "your output sums over the batch (dim 0, one too low). Coverage sums over the target steps, dim 1 of "
            "(batch, tgt_len, src_len), separately for each sentence.",
            lambda w, s, t: _steps_below(w, t).sum(dim=0),
        ),
        Variant(
            "off by one: the first padded target row (t = tgt_length) was counted too. Step t is real when "
            "t < tgt_lengths[b] (steps count from 0): rows 0 to tgt_lengths[b] - 1.",
            lambda w, s, t: _source_below(_steps_below(w, t + 1).sum(dim=1), s),
        ),
        Variant(
            "off by one: the last real target step (t = tgt_length - 1) was left out. Step t is real when "
            "t < tgt_lengths[b] (steps count from 0): rows 0 to tgt_lengths[b] - 1.",
            lambda w, s, t: _source_below(_steps_below(w, t - 1).sum(dim=1), s),
        ),
        Variant(
            "your output is the mean over the real target steps, not their sum. Coverage adds the weights up, so a "
            "source word that got all the attention at 3 steps has coverage 3: do not divide by tgt_lengths.",
            lambda w, s, t: _coverage(w, s, t) / t[:, None],
        ),
        Variant(
            "your output is the mean over all target steps, padded rows included. Coverage is the sum over the real "
            "steps only.",
            lambda w, s, t: w.mean(dim=1),
        ),
        Variant(
            "the padded source positions are not 0: when a real target step put weight on them (an attention that did "
            "not mask the source), your output keeps it. Coverage is 0 at the padded source positions, j >= "
            "src_lengths[b], whatever the weights there.",
            lambda w, s, t: _steps_below(w, t).sum(dim=1),
        ),
        Variant(
            "src_lengths and tgt_lengths are swapped: the target rows were cut at the source lengths and the source "
            "positions at the target lengths. `tgt_lengths` says which rows (decoder steps) are real, `src_lengths` "
            "which columns (source words).",
            lambda w, s, t: _source_below(_steps_below(w, s).sum(dim=1), t),
        ),
    ),
    hint=(
        "Sum each source word's weights over the decoder steps, but only over each sentence's real steps; and a "
        "padded source position gets 0 whatever its weights say.",
        "Two padding masks, as in lesson 01: real steps `torch.arange(tgt_len)[None, :] < tgt_lengths[:, None]` "
        "(batch, tgt_len), real words the same with src_len and src_lengths. Zero the padded steps' rows (give "
        "their mask a source axis), sum over dim 1, then zero the padded source positions.",
        "`steps = torch.arange(tgt_len)[None, :] < tgt_lengths[:, None]`, `words` the same for the source; "
        "`total = weights.masked_fill(~steps[:, :, None], 0.0).sum(dim=1)`; `return total.masked_fill(~words, 0.0)`.",
    ),
)

EXERCISES = (ADDITIVE_SCORE, MASKED_SOFTMAX, CONTEXT_VECTOR, DECODER_STEP, COVERAGE)
