"""Checks for the exercises of lesson 03 (Luong attention).

Every exercise has test cases with a batch of one, with and without padding, and with large inputs (scores
or a tanh's argument in the hundreds or more, where a hand-written exp overflows in float32); the first case
is square (every size equal) so that the known-wrong variants that need two sizes to match run on it, the
others have sizes that differ so that a transpose shows. References come from the package:
``attnedu.attention`` (the scores, masked softmax, context) and, for the decoder step, the formulas of
``attnedu.models.LuongDecoder`` written out (tests/test_checks.py checks that the two agree).

local_p_weight_sum is a prediction (how much weight local-p's Gaussian leaves when every score in the window is
equal, windows cut by the source's ends among the cases): its reference is ``attnedu.attention.local_p_uniform_sum``,
which tests/test_attention.py checks against ``local_p_weights`` itself. Its inputs are a few numbers per sentence.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..attention import context_vector, general_score, local_p_uniform_sum, masked_softmax
from ..masks import padding_mask
from .exercise import (
    LARGE,
    ONE,
    PADDED,
    UNPADDED,
    Case,
    Exercise,
    Layout,
    Variant,
    explicit_weights,
    generator,
    kinds,
    randn,
)
from .mistakes import TRANSPOSED_SCORES

LESSON = "03_luong_attention"

# Mistakes in placing the projected query against the keys, made in general_score and again in a decoder step.
_QUERY_BATCH_ONE_LATE = (
    "source position j of every sentence was scored with sentence j's query: the projected query's batch axis met the "
    "keys' source axis, one axis too late (as when the query's new axis goes in front; it runs only when batch equals "
    "src_len). The projected query needs an axis of size 1 for the source positions right after the batch, so that "
    "every position of a sentence meets that sentence's query."
)
_QUERY_FEATURES_ONE_EARLY = (
    "the projected query's features met the keys' source axis, one axis too early (its new axis went last: (batch, "
    "enc_dim, 1), which runs only when src_len equals enc_dim), so features and positions got mixed. The projected "
    "query needs an axis of size 1 for the source positions right after the batch: (batch, 1, enc_dim)."
)

# --------------------------------------------------------------------------------------------
# general_score
# --------------------------------------------------------------------------------------------


def _general_score_cases() -> list[Case]:
    g = generator(31)

    def case(sizes: tuple[int, ...], tags, lengths: list[int] | None = None, scale: float = 1.0, note: str = ""):
        batch, src_len, dec_dim, enc_dim = sizes
        keys = scale * randn(g, batch, src_len, enc_dim)
        if lengths is not None:  # zeros at padded positions, as pad_packed_sequence leaves them
            keys = keys * padding_mask(torch.tensor(lengths), src_len)[:, :, None]
            note = note or f"lengths {lengths}, zero keys at padding (scored like any position: masking comes later)"
        description = f"batch {batch}, src_len {src_len}, dec_dim {dec_dim}, enc_dim {enc_dim}"
        args = (randn(g, batch, dec_dim), keys, randn(g, dec_dim, enc_dim))
        return Case(description + (f"; {note}" if note else ""), args, tags)

    return [
        case((4, 4, 4, 4), kinds(UNPADDED)),
        case((3, 5, 3, 6), kinds(PADDED), lengths=[5, 2, 4]),
        case((1, 3, 2, 5), kinds(ONE, UNPADDED)),
        case((1, 4, 5, 3), kinds(ONE, PADDED), lengths=[2]),
        case((2, 6, 4, 2), kinds(UNPADDED)),
        case((2, 5, 3, 4), kinds(LARGE, UNPADDED), scale=1000.0, note="keys around ±1000, scores in the thousands"),
    ]


def _positions_layout(args: tuple) -> tuple[Layout]:
    return (Layout(positions=1),)


GENERAL_SCORE = Exercise(
    name="general_score",
    lesson=LESSON,
    params=("query", "keys", "W_a"),
    returns=(("batch", "src_len"),),
    reference=general_score,
    make_cases=_general_score_cases,
    gradients=True,  # it takes part in training: gradients must flow through it
    layout=_positions_layout,
    variants=(
        Variant(
            "W_a is missing: your scores are s^T h_j, Luong's dot score (it runs only when dec_dim equals enc_dim). "
            "The general score puts W_a between them: s^T W_a h_j.",
            lambda q, k, W: (q[:, None, :] * k).sum(-1),
        ),
        Variant(
            "your scores use W_a^T in place of W_a (they run only when dec_dim equals enc_dim). W_a is (dec_dim, "
            "enc_dim), so s^T W_a, the query times W_a, has enc_dim features, which then meet each h_j.",
            lambda q, k, W: general_score(q, k, W.T),
        ),
        Variant(
            "your output is the softmax of the scores: this function returns the raw scores e_j. The softmax, "
            "with its mask, comes after.",
            lambda q, k, W: torch.softmax(general_score(q, k, W), dim=-1),
        ),
        Variant(
            "your scores are divided by sqrt(enc_dim), as scaled dot-product attention (lesson 04) does. Luong's "
            "general score is not scaled: e_j = s^T W_a h_j.",
            lambda q, k, W: general_score(q, k, W) / math.sqrt(k.shape[-1]),
        ),
        Variant(
            TRANSPOSED_SCORES,
            lambda q, k, W: general_score(q, k, W).T,
        ),
        Variant(
            "your output is the matrix product of the 2-D projected query with the transposed keys, which broadcasts "
            "over the batch: every sentence's query meets every sentence's keys, (batch, batch, src_len). Each "
            "sentence's query must meet only that sentence's keys, one score per source position: (batch, src_len).",
            lambda q, k, W: (q @ W) @ k.transpose(1, 2),
        ),
        Variant(
            "the output has an extra dimension of size 1: (batch, 1, src_len), the query's step axis, which the "
            "batched matrix product keeps. The scores are one row per sentence, (batch, src_len).",
            lambda q, k, W: (q @ W)[:, None, :] @ k.transpose(1, 2),
        ),
        Variant(
            _QUERY_BATCH_ONE_LATE,
            lambda q, k, W: ((q @ W)[None, :, :] * k).sum(-1),
        ),
        Variant(
            _QUERY_FEATURES_ONE_EARLY,
            lambda q, k, W: ((q @ W)[:, :, None] * k).sum(-1),
        ),
    ),
    hint=(
        "s^T W_a h_j = (s^T W_a) . h_j: project the query once, then take one dot product per source position.",
        "`query @ W_a` is s^T W_a, (batch, enc_dim). Give it a source axis, `[:, None, :]`, multiply with `keys` "
        "(batch, src_len, enc_dim) and sum over the last axis; or use `torch.bmm` with `keys.transpose(1, 2)`.",
        "`return ((query @ W_a)[:, None, :] * keys).sum(dim=-1)`.",
    ),
)

# --------------------------------------------------------------------------------------------
# attentional_hidden
# --------------------------------------------------------------------------------------------


def _attentional_hidden(context: torch.Tensor, state: torch.Tensor, W_c: torch.Tensor) -> torch.Tensor:
    """s~_t = tanh(W_c [c_t; s_t]): context (..., enc_dim), state (..., hidden_dim), W_c (hidden_dim, enc_dim +
    hidden_dim) -> (..., hidden_dim), as attnedu.models.LuongDecoder.attend computes it (its `combine`)."""
    return torch.tanh(torch.cat([context, state], dim=-1) @ W_c.T)


def _attentional_hidden_cases() -> list[Case]:
    g = generator(32)

    def case(sizes: tuple[int, ...], tags, tgt_lengths: list[int] | None = None, scale: float = 1.0, note=""):
        batch, tgt_len, enc_dim, hidden_dim = sizes
        context = scale * randn(g, batch, tgt_len, enc_dim)
        state = randn(g, batch, tgt_len, hidden_dim)
        if tgt_lengths is not None:  # padded target steps: zero states and contexts, as pad_packed_sequence leaves
            steps = padding_mask(torch.tensor(tgt_lengths), tgt_len)[:, :, None]
            context, state = context * steps, state * steps
            note = note or f"target lengths {tgt_lengths}, zero states and contexts at padded steps"
        W_c = randn(g, hidden_dim, enc_dim + hidden_dim)
        description = f"batch {batch}, tgt_len {tgt_len}, enc_dim {enc_dim}, hidden_dim {hidden_dim}"
        return Case(description + (f"; {note}" if note else ""), (context, state, W_c), tags)

    return [
        case((3, 3, 3, 3), kinds(UNPADDED)),
        case((3, 4, 5, 2), kinds(PADDED), tgt_lengths=[4, 1, 3]),
        case((1, 2, 4, 3), kinds(ONE, UNPADDED)),
        case((1, 5, 2, 4), kinds(ONE, PADDED), tgt_lengths=[3]),
        case((2, 3, 6, 5), kinds(UNPADDED)),
        case(
            (2, 4, 3, 4),
            kinds(LARGE, UNPADDED),
            scale=300.0,
            note="contexts around ±300, so W_c [c_t; s_t] is in the hundreds, where exp overflows",
        ),
    ]


def _steps_layout(args: tuple) -> tuple[Layout]:
    return (Layout(positions=1),)


ATTENTIONAL_HIDDEN = Exercise(
    name="attentional_hidden",
    lesson=LESSON,
    params=("context", "state", "W_c"),
    returns=(("batch", "tgt_len", "hidden_dim"),),
    reference=_attentional_hidden,
    make_cases=_attentional_hidden_cases,
    gradients=True,  # it takes part in training: gradients must flow through it
    layout=_steps_layout,
    variants=(
        Variant(
            "the tanh is missing: your output is W_c [c_t; s_t], but s~_t = tanh(W_c [c_t; s_t]).",
            lambda c, h, W: torch.cat([c, h], dim=-1) @ W.T,
        ),
        Variant(
            "the concatenation is in the wrong order: [s_t; c_t] instead of [c_t; s_t] (it runs only when enc_dim "
            "equals hidden_dim). The first enc_dim columns of W_c meet the context, the last hidden_dim the state.",
            lambda c, h, W: _attentional_hidden(h, c, W),
        ),
        Variant(
            "the tanh is applied before W_c: your output is W_c tanh([c_t; s_t]). The formula is "
            "tanh(W_c [c_t; s_t]): multiply first, then tanh.",
            lambda c, h, W: torch.tanh(torch.cat([c, h], dim=-1)) @ W.T,
        ),
        Variant(
            "your output ignores the context: tanh(W_c [0; s_t]), the state's part alone. s~_t combines the context "
            "c_t with the state s_t.",
            lambda c, h, W: torch.tanh(h @ W[:, c.shape[-1] :].T),
        ),
        Variant(
            "your output ignores the state: tanh(W_c [c_t; 0]), the context's part alone. s~_t combines the context "
            "c_t with the state s_t.",
            lambda c, h, W: torch.tanh(c @ W[:, : c.shape[-1]].T),
        ),
        Variant(
            "a sigmoid where the formula has a tanh: s~_t = tanh(W_c [c_t; s_t]), with values in (-1, 1).",
            lambda c, h, W: torch.sigmoid(torch.cat([c, h], dim=-1) @ W.T),
        ),
        Variant(
            "a ReLU where the formula has a tanh: s~_t = tanh(W_c [c_t; s_t]), with values in (-1, 1).",
            lambda c, h, W: torch.relu(torch.cat([c, h], dim=-1) @ W.T),
        ),
    ),
    hint=(
        "Put the context and the state side by side, context first, apply W_c, then tanh. Vectors are rows.",
        "`torch.cat([context, state], dim=-1)` is (..., enc_dim + hidden_dim); W_c x for a row x is `x @ W_c.T`. "
        "With dim=-1 the same code works for one step and for all steps.",
        "`return torch.tanh(torch.cat([context, state], dim=-1) @ W_c.T)`.",
    ),
)

# --------------------------------------------------------------------------------------------
# attend_all_steps
# --------------------------------------------------------------------------------------------


def _attend_all_steps(states, annotations, src_lengths, W_a):
    """Luong's general attention for every decoder step at once, as LuongAttention.forward computes it.

    states (batch, tgt_len, hidden_dim), annotations (batch, src_len, enc_dim), src_lengths (batch,),
    W_a (hidden_dim, enc_dim) -> context (batch, tgt_len, enc_dim), weights (batch, tgt_len, src_len)."""
    scores = general_score(states, annotations, W_a)  # (batch, tgt_len, src_len)
    mask = padding_mask(src_lengths, annotations.shape[1])[:, None, :].expand_as(scores)
    weights = masked_softmax(scores, mask)
    return context_vector(weights, annotations), weights


def _attend_all_steps_cases() -> list[Case]:
    g = generator(33)

    def case(sizes: tuple[int, ...], lengths: list[int], tags, scale: float = 1.0, note: str = "") -> Case:
        batch, tgt_len, src_len, hidden_dim, enc_dim = sizes
        annotations = scale * randn(g, batch, src_len, enc_dim)
        states, W_a = randn(g, batch, tgt_len, hidden_dim), randn(g, hidden_dim, enc_dim)
        args = (states, annotations, torch.tensor(lengths), W_a)
        padding = "no padding" if min(lengths) == src_len else f"source lengths {lengths}"
        description = f"batch {batch}, tgt_len {tgt_len}, src_len {src_len}, hidden_dim {hidden_dim}, enc_dim {enc_dim}"
        return Case(f"{description}, {padding}" + (f"; {note}" if note else ""), args, tags)

    return [
        case((4, 4, 4, 4, 4), [4, 2, 3, 1], kinds(PADDED)),
        case((3, 5, 4, 3, 6), [4, 2, 3], kinds(PADDED)),
        case((1, 3, 5, 2, 3), [5], kinds(ONE, UNPADDED)),
        case((1, 4, 6, 5, 2), [3], kinds(ONE, PADDED)),
        case((2, 2, 3, 4, 5), [3, 3], kinds(UNPADDED)),
        case(
            (2, 3, 5, 3, 4),
            [5, 3],
            kinds(LARGE, PADDED),
            scale=100.0,
            note="annotations around ±100, so the scores are in the hundreds, where exp overflows",
        ),
    ]


def _attend_with(mask_of=None, dim: int = -1, fill: float = float("-inf"), W_transposed: bool = False, nan=False):
    """A known-wrong attend_all_steps: ``mask_of(src_lengths, src_len)`` gives the (batch, src_len) mask (None: no
    mask), broadcast over the target steps; softmax over ``dim``; masked scores set to ``fill``; the NaN of a fully
    masked row kept if ``nan``, else 0."""

    def attend(states, annotations, src_lengths, W_a):
        scores = general_score(states, annotations, W_a.T if W_transposed else W_a)
        if mask_of is not None:
            scores = scores.masked_fill(~mask_of(src_lengths, annotations.shape[1])[:, None, :], fill)
        weights = torch.softmax(scores, dim=dim)
        weights = weights if nan else weights.nan_to_num(0.0)
        return weights @ annotations, weights

    return attend


def _lengths_mask(offset: int):
    return lambda lengths, src_len: torch.arange(src_len)[None, :] < (lengths + offset)[:, None]


def _mask_on_steps(nan: bool):
    """The padding mask broadcast along the target steps, `mask[:, :, None]` (runs when tgt_len == src_len)."""

    def attend(states, annotations, src_lengths, W_a):
        scores = general_score(states, annotations, W_a)
        mask = padding_mask(src_lengths, annotations.shape[1])
        weights = torch.softmax(scores.masked_fill(~mask[:, :, None], float("-inf")), dim=-1)
        weights = weights if nan else weights.nan_to_num(0.0)
        return weights @ annotations, weights

    return attend


def _attend_layout(args: tuple) -> tuple[Layout | None, ...]:
    _, annotations, src_lengths, _ = args
    real = padding_mask(src_lengths, annotations.shape[1])
    return None, Layout(positions=2, real=real, words=("real source positions", "padding positions"))


ATTEND_ALL_STEPS = Exercise(
    name="attend_all_steps",
    lesson=LESSON,
    params=("states", "annotations", "src_lengths", "W_a"),
    returns=(("batch", "tgt_len", "enc_dim"), ("batch", "tgt_len", "src_len")),
    reference=_attend_all_steps,
    make_cases=_attend_all_steps_cases,
    gradients=True,  # it takes part in training: gradients must flow through it
    output_names=("context", "weights"),
    layout=_attend_layout,
    variants=(
        Variant(
            "the attention gives weight to padding, as it does without a mask: your weights at source positions j >= "
            "src_lengths[b] are not 0. The padding mask comes from src_lengths (as in lesson 01), and the padded "
            "scores must be -inf before the softmax.",
            _attend_with(mask_of=None),
        ),
        Variant(
            "the mask is inverted: the real source positions got zero weight and the padding got all of it (a "
            "sentence without padding has every position hidden). Position j of sentence b is real when j < "
            "src_lengths[b]: those are the positions whose scores stay.",
            _attend_with(mask_of=lambda n, s: ~_lengths_mask(0)(n, s)),
            _attend_with(mask_of=lambda n, s: ~_lengths_mask(0)(n, s), nan=True),
        ),
        Variant(
            "off by one: the first padded position (j = length) gets weight too, in every padded sentence. Position j "
            "of sentence b is real when j < src_lengths[b], counting from 0.",
            _attend_with(mask_of=_lengths_mask(1)),
        ),
        Variant(
            "off by one: the last real source word (j = length - 1) gets no weight, in every sentence. Position j of "
            "sentence b is real when j < src_lengths[b], counting from 0.",
            _attend_with(mask_of=_lengths_mask(-1)),
            _attend_with(mask_of=_lengths_mask(-1), nan=True),
        ),
        Variant(
            "the padding mask was applied along the target steps (it runs only when tgt_len equals src_len): your "
            "mask hides whole rows, the steps t >= src_lengths[b], instead of the padded source positions. The mask "
            "is over source positions, the last axis of the (batch, tgt_len, src_len) scores: the same for every "
            "step, so its axis of size 1 is the steps' axis, in the middle.",
            _mask_on_steps(nan=False),
            _mask_on_steps(nan=True),
        ),
        Variant(
            "softmax over the wrong axis (dim=1, the target steps): each source position's weights sum to one over "
            "the steps. Each step's weights are a distribution over the source positions, the last axis.",
            _attend_with(mask_of=_lengths_mask(0), dim=1),
            _attend_with(mask_of=_lengths_mask(0), dim=1, nan=True),
        ),
        Variant(
            "softmax over the wrong axis (dim=0, across the batch): each step's weights sum to one over the "
            "sentences. Each step's weights are a distribution over the source positions, the last axis.",
            _attend_with(mask_of=_lengths_mask(0), dim=0),
            _attend_with(mask_of=_lengths_mask(0), dim=0, nan=True),
        ),
        Variant(
            "the masked scores became 0 instead of -inf before the softmax, so padding still gets weight (exp(0) = "
            "1). A masked score must be -inf, the one value whose exponential is 0.",
            _attend_with(mask_of=_lengths_mask(0), fill=0.0),
        ),
        Variant(
            "your scores use W_a^T in place of W_a (they run only when hidden_dim equals enc_dim). W_a is "
            "(hidden_dim, enc_dim): a state of hidden_dim features times W_a has enc_dim features, which meet each "
            "annotation.",
            _attend_with(mask_of=_lengths_mask(0), W_transposed=True),
        ),
    ),
    hint=(
        "The general score for every step at once is one matrix of scores per sentence, (tgt_len, src_len); mask "
        "the padded source positions (the same at every step), softmax over the source, then a weighted sum.",
        "The rule, in shapes: the scores are S W_a H^T, (batch, tgt_len, hidden_dim) times (hidden_dim, enc_dim) "
        "times (batch, enc_dim, src_len). A source position j of sentence b is real when j < src_lengths[b]: a "
        "(batch, src_len) mask, which needs a step axis of size 1 to meet (batch, tgt_len, src_len). Padded "
        "scores become -inf before the softmax over the source axis, and the contexts are the weights times H.",
        "`real = torch.arange(annotations.shape[1])[None, :] < src_lengths[:, None]`; "
        "`scores = (states @ W_a @ annotations.transpose(1, 2)).masked_fill(~real[:, None, :], float('-inf'))`; "
        "`weights = torch.softmax(scores, dim=-1)`; `return weights @ annotations, weights`.",
    ),
)

# --------------------------------------------------------------------------------------------
# general_decoder_step: Luong's decoder step with input feeding and the general score (not in the lesson)
# --------------------------------------------------------------------------------------------


def _general_decoder_step(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
    """One step of Luong's decoder with input feeding and the general score, as LuongDecoder._step computes it.

    s_t = GRU([E y_{t-1}; s~_{t-1}], s_{t-1}); a_t = softmax(s_t^T W_a h_j) over the real positions;
    c_t = sum_j a_tj h_j; s~_t = tanh(W_c [c_t; s_t]); logits = W_s s~_t.
    -> logits (batch, vocab), s_t (batch, hidden_dim), s~_t (batch, hidden_dim), a_t (batch, src_len)."""
    new_state = cell(torch.cat([embedded, attentional], dim=-1), state)
    weights = masked_softmax(general_score(new_state, annotations, W_a), mask)
    context = context_vector(weights, annotations)
    new_attentional = torch.tanh(combine(torch.cat([context, new_state], dim=-1)))
    return out(new_attentional), new_state, new_attentional, weights


def _general_decoder_step_cases() -> list[Case]:
    g = generator(34)

    def case(sizes: tuple[int, ...], lengths: list[int], tags, scale: float = 1.0, note: str = "") -> Case:
        batch, src_len, emb, hidden, enc = sizes
        with torch.random.fork_rng(devices=[]):  # module constructors draw from the global RNG: leave it as it was
            cell = nn.GRUCell(emb + hidden, hidden)
            combine = nn.Linear(enc + hidden, hidden, bias=False)
            out = nn.Linear(hidden, 7)
        explicit_weights(g, cell, combine, out, scale=0.5)
        args = (
            randn(g, batch, emb),
            randn(g, batch, hidden),
            torch.tanh(randn(g, batch, hidden)),  # s~_{t-1}, in (-1, 1) as a tanh leaves it
            scale * randn(g, batch, src_len, enc),
            padding_mask(torch.tensor(lengths), src_len),
            scale * randn(g, hidden, enc),
            cell,
            combine,
            out,
        )
        padding = "no padding" if min(lengths) == src_len else f"lengths {lengths}"
        description = f"batch {batch}, src_len {src_len}, emb_dim {emb}, hidden_dim {hidden}, enc_dim {enc}, {padding}"
        return Case(description + (f"; {note}" if note else ""), args, tags)

    return [
        case((4, 4, 4, 4, 4), [4, 2, 3, 1], kinds(PADDED)),
        case((2, 5, 3, 6, 8), [5, 2], kinds(PADDED)),
        case((1, 3, 2, 3, 5), [3], kinds(ONE, UNPADDED)),
        case((1, 6, 3, 2, 4), [4], kinds(ONE, PADDED)),
        case((2, 3, 5, 4, 3), [3, 3], kinds(UNPADDED)),
        case(
            (2, 5, 3, 4, 6),
            [5, 3],
            kinds(LARGE, PADDED),
            scale=20.0,
            note="annotations and W_a 20 times larger, so the attention scores are in the hundreds",
        ),
    ]


def _luong_step_with(
    gru_input="ea", attend_from="new", combine_order="ch", combine_state="new", readout="att", state_out="new",
    use_mask=True, score=None,
):  # fmt: skip
    """A known-wrong general_decoder_step, built from which tensors go where (e: embedded, a: s~_{t-1}, s: s_{t-1})."""

    def step(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
        parts = {"e": embedded, "a": attentional, "s": state}
        new_state = cell(torch.cat([parts[p] for p in gru_input], dim=-1), state)
        query = new_state if attend_from == "new" else state
        scores = (score or general_score)(query, annotations, W_a)
        weights = masked_softmax(scores, mask if use_mask else None)
        context = context_vector(weights, annotations)
        h = new_state if combine_state == "new" else state
        combined = torch.cat([context, h] if combine_order == "ch" else [h, context], dim=-1)
        new_attentional = torch.tanh(combine(combined)) if readout != "no_tanh" else combine(combined)
        logits = out(new_state if readout == "state" else new_attentional)
        return logits, (new_state if state_out == "new" else state), new_attentional, weights

    return step


def _step_layout(args: tuple) -> tuple[Layout | None, ...]:
    mask = args[4]
    return None, None, None, Layout(positions=1, real=mask, words=("real source positions", "padding positions"))


GENERAL_DECODER_STEP = Exercise(
    name="general_decoder_step",
    lesson=LESSON,
    params=("embedded", "state", "attentional", "annotations", "mask", "W_a", "cell", "combine", "out"),
    returns=(("batch", "vocab"), ("batch", "hidden_dim"), ("batch", "hidden_dim"), ("batch", "src_len")),
    reference=_general_decoder_step,
    make_cases=_general_decoder_step_cases,
    gradients=True,  # it takes part in training: gradients must flow through it
    output_names=("logits", "new_state", "new_attentional", "weights"),
    layout=_step_layout,
    variants=(
        Variant(
            "one step early: the attention asks with the previous state s_{t-1} (Bahdanau's order). Luong's decoder "
            "updates the state first, s_t = GRU(...), then attends from the new s_t.",
            _luong_step_with(attend_from="old"),
        ),
        Variant(
            "the GRU input is concatenated in the wrong order. The cell was built for [E y_{t-1}; s~_{t-1}]: the "
            "embedding first, then the previous attentional state.",
            _luong_step_with(gru_input="ae"),
        ),
        Variant(
            "the GRU input has the previous state s_{t-1} where s~_{t-1} belongs (input feeding passes the previous "
            "attentional state, `attentional`); the state goes in as the cell's second argument.",
            _luong_step_with(gru_input="es"),
        ),
        Variant(
            "s~_t is built from [s_t; c_t], the wrong order: the combine layer was built for [c_t; s_t], the context "
            "first, then the new state.",
            _luong_step_with(combine_order="hc"),
        ),
        Variant(
            "s~_t combines c_t with the previous state s_{t-1}; it combines it with the new state s_t.",
            _luong_step_with(combine_state="old"),
        ),
        Variant(
            "the tanh is missing: s~_t = tanh(W_c [c_t; s_t]), and the logits are W_s s~_t.",
            _luong_step_with(readout="no_tanh"),
        ),
        Variant(
            "the logits come from the state s_t; Luong's decoder predicts from the attentional state s~_t: it is what "
            "the output layer reads.",
            _luong_step_with(readout="state"),
        ),
        Variant(
            "the state you returned is the previous state s_{t-1}. Return the new state s_t that the GRU cell "
            "computed: the next step starts from it.",
            _luong_step_with(state_out="old"),
        ),
        Variant(
            "the attention gives weight to padding (your weights at the padding positions are not 0), as it does "
            "without the mask: the mask applies to the scores, before the softmax (-inf where the mask is False).",
            _luong_step_with(use_mask=False),
        ),
        Variant(
            _QUERY_BATCH_ONE_LATE,
            _luong_step_with(score=lambda q, k, W: ((q @ W)[None, :, :] * k).sum(-1)),
        ),
        Variant(
            _QUERY_FEATURES_ONE_EARLY,
            _luong_step_with(score=lambda q, k, W: ((q @ W)[:, :, None] * k).sum(-1)),
        ),
    ),
    hint=(
        "Luong's order: update the state first (it reads the previous word and, with input feeding, s~_{t-1}), then "
        "attend from the new state s_t, then combine context and state into s~_t, which predicts.",
        "`new_state = cell(torch.cat([embedded, attentional], -1), state)`; the general scores of `new_state` "
        "(exercise 1), -inf where `~mask`, softmax over the last axis; the context is the weighted sum of the "
        "annotations; s~_t = tanh(W_c [c_t; s_t]) is exercise 2 with `combine.weight`.",
        "`weights = torch.softmax(general_score(new_state, annotations, W_a).masked_fill(~mask, float('-inf')), "
        "-1)`; `context = (weights[:, :, None] * annotations).sum(1)`; `new_attentional = "
        "attentional_hidden(context, new_state, combine.weight)`; `return out(new_attentional), new_state, "
        "new_attentional, weights`.",
    ),
)

# --------------------------------------------------------------------------------------------
# local_p_weight_sum: predict how much weight local-p leaves when the window's scores are equal (not in the lesson)
# --------------------------------------------------------------------------------------------


def _local_p_cases() -> list[Case]:
    def case(center: list[float], half_width: int, lengths: list[int], tags, note: str = "") -> Case:
        padding = "every source as long as the batch" if len(set(lengths)) == 1 else "sources of different lengths"
        description = f"p_t {center}, D {half_width}, src_lengths {lengths} ({padding})"
        args = (torch.tensor(center), half_width, torch.tensor(lengths))
        return Case(description + (f"; {note}" if note else ""), args, tags)

    return [
        case([6.3, 2.0, 4.7], 2, [10, 10, 10], kinds(UNPADDED), "every window inside its source"),
        case([0.4, 7.6, 3.0], 2, [10, 9, 4], kinds(PADDED), "windows cut by an end of the source"),
        case([0.5], 1, [6], kinds(ONE, UNPADDED), "p_t halfway between positions 0 and 1: halves round up"),
        case([1.2], 3, [3], kinds(ONE, UNPADDED), "a source shorter than the window: cut at both ends"),
        case([3.4, 0.0], 1, [8, 2], kinds(PADDED)),
        case([5.5, 2.5], 3, [12, 12], kinds(UNPADDED),
             "p_t halfway between two positions (5.5: the window inside the source; 2.5: reaching its start)"),
        case([500.3, 1234.8], 100, [1000, 2000], kinds(LARGE, PADDED), "wide windows over long sources"),
    ]


def _window_sum(center, half_width, lengths, *, at=None, sigma=None, two=2.0, width=None, rounding="up",
                count="window", clip=True, whole_source=False, longest=False):  # fmt: skip
    """A known-wrong local_p_weight_sum: the Gaussian centred ``at`` (default p_t; "round": round(p_t)), of
    standard deviation ``sigma(D)`` (default D / 2) with exp(-d^2 / (two sigma^2)); the window |j - r| <= ``width(D)``
    (default D) around r = round(p_t) (``rounding`` "up" for halves up, "even" as torch.round, or "floor-ceil" for
    floor(p_t - D)..ceil(p_t + D)); cut at the source's ends if ``clip``; each position's softmax weight 1 / n with n
    the window's positions (``count="window"``), 2D + 1 (``"full"``) or, with ``whole_source``, S; with ``count=None``
    the Gaussian summed without the softmax; with ``rounding="none"`` the window is |j - p_t| <= ``width(D)``, around
    p_t itself."""
    S = torch.full_like(lengths, int(lengths.max())) if longest else lengths
    D = half_width
    span = D if width is None else width(D)
    reach = int(S.max()) + 2 * span + 4
    j = torch.arange(-reach, reach + int(S.max()), dtype=center.dtype)[None, :]
    p = center[:, None]
    if rounding == "floor-ceil":
        window = (j >= torch.floor(p - D)) & (j <= torch.ceil(p + D))
    elif rounding == "none":
        window = (j - p).abs() <= span
    else:
        r = torch.floor(p + 0.5) if rounding == "up" else torch.round(p)
        window = (j - r).abs() <= span
    if clip:
        window = window & (j >= 0) & (j < S[:, None])
    mu = torch.floor(p + 0.5) if at == "round" else p
    s = D / 2 if sigma is None else sigma(D)
    gaussian = torch.exp(-((j - mu) ** 2) / (two * s**2)) * window
    if count is None:
        return gaussian.sum(dim=-1)
    if whole_source:
        n = S.to(center.dtype)
    else:
        n = torch.full_like(center, 2 * D + 1) if count == "full" else window.sum(-1)
    return gaussian.sum(dim=-1) / n


LOCAL_P_WEIGHT_SUM = Exercise(
    name="local_p_weight_sum",
    lesson=LESSON,
    params=("center", "half_width", "src_lengths"),
    returns=(("batch",),),
    reference=local_p_uniform_sum,
    make_cases=_local_p_cases,
    # the prediction is the learner's own: local_p_weights (which the notebook measures with afterwards) and
    # local_p_uniform_sum earn nothing inside it
    forbidden=("attnedu.attention",),
    variants=(
        Variant(
            "your Gaussian is centred on round(p_t), the window's middle position; in local-p the window is centred "
            "on the nearest position but the Gaussian on p_t itself, which need not be a whole number.",
            lambda c, d, n: _window_sum(c, d, n, at="round"),
        ),
        Variant(
            "your Gaussian is too wide: its standard deviation is D. Luong et al. set sigma = D / 2, so the weights "
            "fall off within the window.",
            lambda c, d, n: _window_sum(c, d, n, sigma=lambda D: D),
        ),
        Variant(
            "the 2 in the Gaussian's denominator is missing: exp(-(j - p_t)^2 / sigma^2) falls off faster than the "
            "Gaussian of standard deviation sigma, whose exponent is -(j - p_t)^2 / (2 sigma^2).",
            lambda c, d, n: _window_sum(c, d, n, two=1.0),
        ),
        Variant(
            "your window runs from floor(p_t - D) to ceil(p_t + D): 2D + 2 positions when p_t is not a whole number. "
            "The window holds the 2D + 1 positions j with |j - round(p_t)| <= D.",
            lambda c, d, n: _window_sum(c, d, n, rounding="floor-ceil"),
        ),
        Variant(
            "at a p_t halfway between two positions (x.5) your window holds 2D + 2 positions: it reaches D + 1/2 "
            "from p_t on both sides, so it takes both neighbours of the middle. The window holds 2D + 1 positions "
            "wherever p_t lies, fewer only where an end of the source cuts it.",
            lambda c, d, n: _window_sum(c, d, n, rounding="none", width=lambda D: D + 0.5),
        ),
        Variant(
            "p_t halfway between two positions was rounded to the even one, as torch.round does; the window is "
            "centred on the nearest position with halves rounded up, floor(p_t + 0.5), as the lesson's "
            "local_p_weights does.",
            lambda c, d, n: _window_sum(c, d, n, rounding="even"),
        ),
        Variant(
            "each window position got 1 / (2D + 1) even where the window is cut by an end of the source: the "
            "softmax shares the weight among the positions the window actually holds inside the source.",
            lambda c, d, n: _window_sum(c, d, n, count="full"),
        ),
        Variant(
            "your window runs past the ends of the source: positions below 0 or at S and beyond are counted, in the "
            "Gaussian's sum and among the positions sharing the softmax. The window holds only real positions, "
            "0 to S - 1.",
            lambda c, d, n: _window_sum(c, d, n, clip=False),
        ),
        Variant(
            "your sum is the Gaussian's, without the softmax: each window position has softmax weight 1 / n (n "
            "positions in the window, all scores equal), which multiplies its Gaussian factor.",
            lambda c, d, n: _window_sum(c, d, n, count=None),
        ),
        Variant(
            "the softmax was spread over the whole source (1 / S each); in local-p it runs over the window alone, "
            "so each window position gets 1 / n, n the positions in the window.",
            lambda c, d, n: _window_sum(c, d, n, whole_source=True),
        ),
        Variant(
            "off by one: your window holds the positions with |j - round(p_t)| <= D + 1, one more at each side. Its "
            "half width is D: 2D + 1 positions.",
            lambda c, d, n: _window_sum(c, d, n, width=lambda D: D + 1),
        ),
        Variant(
            "off by one: your window holds the positions with |j - round(p_t)| <= D - 1, one fewer at each side. Its "
            "half width is D: 2D + 1 positions.",
            lambda c, d, n: _window_sum(c, d, n, width=lambda D: D - 1),
        ),
        Variant(
            "every source got the batch's longest length: a shorter source ends earlier, which cuts its window "
            "earlier. Use each sentence's own src_lengths[b].",
            lambda c, d, n: _window_sum(c, d, n, longest=True),
        ),
    ),
    hint=(
        "With every score in the window equal, the softmax gives each window position the same weight. Which "
        "positions are in the window, and what is each one's Gaussian factor? The sum is what is left after the "
        "Gaussian shrinks them.",
        "The window: positions j with |j - floor(p_t + 0.5)| <= D and 0 <= j <= S - 1; with n of them, each gets "
        "1 / n from the softmax. The Gaussian factor is exp(-(j - p_t)^2 / (2 sigma^2)) with sigma = D / 2, "
        "centred on p_t itself. The sum is the mean of the Gaussian factors over the window.",
        "`j = torch.arange(int(src_lengths.max()))[None, :].float()`; `p = center[:, None]`; `window = ((j - "
        "torch.floor(p + 0.5)).abs() <= half_width) & (j < src_lengths[:, None])`; `g = torch.exp(-(j - p) ** 2 / "
        "(2 * (half_width / 2) ** 2))`; `return (g * window).sum(-1) / window.sum(-1)`.",
    ),
)

EXERCISES = (GENERAL_SCORE, ATTENTIONAL_HIDDEN, ATTEND_ALL_STEPS, GENERAL_DECODER_STEP, LOCAL_P_WEIGHT_SUM)
