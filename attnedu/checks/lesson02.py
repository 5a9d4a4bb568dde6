"""Checks for the exercises of lesson 02 (Bahdanau attention)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import torch
from torch import nn

from ..attention import AdditiveAttention, additive_score, context_vector, masked_softmax
from ..masks import padding_mask
from ..models import Decoder, EncoderOutput
from .engine import Case, Exercise, Variant, _generator, _mask, _randn

LESSON = "02_bahdanau_attention"


def _additive_score_cases() -> list[Case]:
    g = _generator(3)

    def case(description: str, batch: int, src_len: int, dec_dim: int, enc_dim: int, attn_dim: int) -> Case:
        args = (
            _randn(g, batch, dec_dim),
            _randn(g, batch, src_len, enc_dim),
            _randn(g, attn_dim, dec_dim),
            _randn(g, attn_dim, enc_dim),
            _randn(g, attn_dim),
        )
        return Case(description, args)

    return [
        case("batch 2, src_len 5, dec_dim = enc_dim = attn_dim = 4", 2, 5, 4, 4, 4),
        case("batch 3, src_len 4, dec_dim 3, enc_dim 6, attn_dim 5", 3, 4, 3, 6, 5),
        case("batch 1, src_len 1, dec_dim 2, enc_dim 3, attn_dim 2", 1, 1, 2, 3, 2),
    ]


def _score_parts(query, keys, W_a, U_a):
    return (query @ W_a.T)[:, None, :], keys @ U_a.T  # (batch, 1, attn_dim), (batch, src_len, attn_dim)


ADDITIVE_SCORE = Exercise(
    name="additive_score",
    lesson=LESSON,
    params=("query", "keys", "W_a", "U_a", "v_a"),
    returns=(("batch", "src_len"),),
    reference=additive_score,
    make_cases=_additive_score_cases,
    variants=(
        Variant(
            "the tanh is missing: e_j = v_a^T tanh(W_a s + U_a h_j). Without it the score is linear in h_j.",
            lambda q, k, W, U, v: (sum(_score_parts(q, k, W, U))) @ v,
        ),
        Variant(
            "you applied a softmax: this function returns the raw scores e_j. The softmax comes in the next "
            "exercise (masked_softmax), where the padding mask is applied first.",
            lambda q, k, W, U, v: torch.softmax(additive_score(q, k, W, U, v), dim=-1),
        ),
        Variant(
            "you summed the attn_dim features instead of taking the dot product with v_a. The score is "
            "`tanh(...) @ v_a`.",
            lambda q, k, W, U, v: torch.tanh(sum(_score_parts(q, k, W, U))).sum(-1),
        ),
        Variant(
            "W_a and U_a are swapped: W_a multiplies the decoder state s (the query) and U_a the encoder "
            "annotations h_j (the keys).",
            lambda q, k, W, U, v: additive_score(q, k, U, W, v),
        ),
        Variant(
            "the output is transposed: (src_len, batch) instead of (batch, src_len). Keep the batch first.",
            lambda q, k, W, U, v: additive_score(q, k, W, U, v).T,
        ),
        Variant(
            "you multiplied by W_a^T and U_a^T instead of W_a and U_a. With vectors as rows, W_a s is "
            "`query @ W_a.T` (W_a is (attn_dim, dec_dim)).",
            lambda q, k, W, U, v: additive_score(q, k, W.T, U.T, v),
        ),
        Variant(
            "the tanh is applied after v_a: the formula is v_a^T tanh(W_a s + U_a h_j), tanh first, then the "
            "dot product with v_a.",
            lambda q, k, W, U, v: torch.tanh(sum(_score_parts(q, k, W, U)) @ v),
        ),
    ),
    hint="Project first: `query @ W_a.T` is (batch, attn_dim) and `keys @ U_a.T` is (batch, src_len, attn_dim). "
    "Insert a source axis into the first with `[:, None, :]` so they add, apply tanh, then `@ v_a`.",
)


def _masked_softmax_cases() -> list[Case]:
    g = _generator(4)
    return [
        Case(
            "3 rows of 5 scores, some positions masked",
            (2 * _randn(g, 3, 5), _mask([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [0, 1, 1, 0, 1]])),
        ),
        Case(
            "2 rows of 4 scores; row 1 is fully masked, so its weights must be all zeros",
            (2 * _randn(g, 2, 4), _mask([[1, 1, 1, 0], [0, 0, 0, 0]])),
        ),
        Case("one row of 3 scores, nothing masked", (2 * _randn(g, 1, 3), _mask([[1, 1, 1]]))),
    ]


def _softmax_filled(scores, mask, fill, dim=-1):
    return torch.softmax(scores.masked_fill(mask, fill), dim=dim)


def _softmax_properties(args: tuple, got) -> str | None:
    """Rows sum to one, masked weights are exactly zero, fully masked rows are all zeros."""
    _, mask = args
    if not isinstance(got, torch.Tensor) or got.shape != mask.shape or not got.is_floating_point():
        return None
    if bool((got[~mask] != 0).any()):
        return "masked positions must get exactly zero weight, and some of yours do not."
    sums = got.sum(dim=-1)
    open_rows = mask.any(dim=-1)
    if not torch.allclose(sums[open_rows], torch.ones_like(sums[open_rows]), atol=1e-4):
        return f"each row's weights must sum to one over the source positions; yours sum to {sums.tolist()}."
    return None


MASKED_SOFTMAX = Exercise(
    name="masked_softmax",
    lesson=LESSON,
    params=("scores", "mask"),
    returns=(("batch", "src_len"),),
    reference=masked_softmax,
    make_cases=_masked_softmax_cases,
    variants=(
        Variant(
            "softmax over the wrong axis (dim=0, across the batch). Each sentence's weights are a distribution "
            "over its own source positions: `dim=-1`.",
            lambda s, m: _softmax_filled(s, ~m, float("-inf"), dim=0).nan_to_num(0.0),
        ),
        Variant(
            "softmax over the wrong axis (dim=0, across the batch). Each sentence's weights are a distribution "
            "over its own source positions: `dim=-1`.",
            lambda s, m: _softmax_filled(s, ~m, float("-inf"), dim=0),
        ),
        Variant(
            "softmax over the wrong axis (dim=0, across the batch). Each sentence's weights are a distribution "
            "over its own source positions: `dim=-1`.",
            lambda s, m: torch.softmax(s, dim=0),
        ),
        Variant(
            "the mask is inverted: the real positions got zero weight and the masked ones got all of it. True "
            "means 'may attend', so fill where the mask is False: `scores.masked_fill(~mask, ...)`.",
            lambda s, m: _softmax_filled(s, m, float("-inf")).nan_to_num(0.0),
        ),
        Variant(
            "the mask is inverted: the real positions got zero weight and the masked ones got all of it. True "
            "means 'may attend', so fill where the mask is False: `scores.masked_fill(~mask, ...)`.",
            lambda s, m: _softmax_filled(s, m, float("-inf")),
        ),
        Variant(
            "the mask is ignored: padded positions get weight. Set their scores to -inf before the softmax.",
            lambda s, m: torch.softmax(s, dim=-1),
        ),
        Variant(
            "masked scores were filled with 0 instead of -inf. exp(0) = 1 is not small: a masked position must "
            "get score -inf so that exp(-inf) = 0.",
            lambda s, m: _softmax_filled(s, ~m, 0.0),
        ),
        Variant(
            "you zeroed the masked weights after the softmax without renormalising, so the weights do not sum "
            "to one. Mask the scores with -inf before the softmax instead.",
            lambda s, m: torch.softmax(s, dim=-1) * m,
        ),
        Variant(
            "a fully masked row gives NaN: the softmax of a row that is all -inf is 0/0. Such a row must give "
            "all zeros: replace the NaN afterwards, e.g. `weights.nan_to_num(0.0)`.",
            lambda s, m: _softmax_filled(s, ~m, float("-inf")),
        ),
        Variant(
            "a fully masked row gets uniform weights, because a large negative number such as -1e9 is still "
            "finite. A row with nothing to attend to must give all zeros (use -inf, then replace the NaN with 0).",
            lambda s, m: _softmax_filled(s, ~m, -1e9),
        ),
    ),
    hint="`scores.masked_fill(~mask, float('-inf'))` sets the masked scores to -inf without changing `scores`; "
    "then `torch.softmax(..., dim=-1)`. A fully masked row comes out as NaN: `.nan_to_num(0.0)` turns it into zeros.",
    properties=_softmax_properties,
)


def _context_vector_cases() -> list[Case]:
    g = _generator(5)
    weights = masked_softmax(_randn(g, 2, 5), _mask([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]))
    one_hot = torch.nn.functional.one_hot(torch.tensor([2, 0, 3]), 4).float()
    return [
        Case("batch 2, src_len 5, enc_dim 3, padding in sentence 1", (weights, _randn(g, 2, 5, 3))),
        Case("batch 3, src_len 4, enc_dim 6, each row of weights one-hot", (one_hot, _randn(g, 3, 4, 6))),
        Case("batch 1, src_len 1, enc_dim 2", (torch.ones(1, 1), _randn(g, 1, 1, 2))),
    ]


CONTEXT_VECTOR = Exercise(
    name="context_vector",
    lesson=LESSON,
    params=("weights", "values"),
    returns=(("batch", "enc_dim"),),
    reference=context_vector,
    make_cases=_context_vector_cases,
    variants=(
        Variant(
            "you took the plain mean of the states, ignoring the weights. The context is the weighted sum "
            "c = sum_j alpha_j h_j.",
            lambda w, v: v.mean(dim=1),
        ),
        Variant(
            "you took the plain sum of the states, ignoring the weights. The context is the weighted sum "
            "c = sum_j alpha_j h_j.",
            lambda w, v: v.sum(dim=1),
        ),
        Variant(
            "you summed over the wrong axis (the enc_dim features, dim 2). The sum runs over source "
            "positions j: dim 1 of (batch, src_len, enc_dim).",
            lambda w, v: (w[:, :, None] * v).sum(dim=2),
        ),
        Variant(
            "the output is transposed: (enc_dim, batch) instead of (batch, enc_dim). Keep the batch first.",
            lambda w, v: context_vector(w, v).T,
        ),
        Variant(
            "`weights @ values` with a 2-D weights tensor broadcasts over the batch: every sentence's weights "
            "meet every sentence's states, (batch, batch, enc_dim). Give weights a middle axis: "
            "`(weights[:, None, :] @ values).squeeze(1)`, or multiply and sum.",
            lambda w, v: w @ v,
        ),
        Variant(
            "the output has an extra dimension of size 1: (batch, 1, enc_dim). Remove it with `.squeeze(1)`.",
            lambda w, v: w[:, None, :] @ v,
        ),
        Variant(
            "you took the state with the largest weight (hard attention). The context is the weighted average "
            "of all states.",
            lambda w, v: v[torch.arange(v.shape[0]), w.argmax(dim=1)],
        ),
    ),
    hint="Give weights a trailing axis, `weights[:, :, None]` is (batch, src_len, 1), so it broadcasts against "
    "values (batch, src_len, enc_dim); multiply, then sum over the source axis.",
)


def _decoder_step_reference(embedded, state, annotations, mask, attention, cell, out):
    """One Bahdanau decoder step, by the package's own Decoder.advance and Decoder.readout."""
    parts = SimpleNamespace(attention=attention, cell=cell, out=out)
    memory = EncoderOutput(annotations, summary=annotations[:, 0], mask=mask)  # summary unused with attention
    new_state, context, weights = Decoder.advance(parts, embedded, state, memory)
    return Decoder.readout(parts, new_state, context, embedded), new_state, weights


def _decoder_step_cases() -> list[Case]:
    g = _generator(6)

    def case(description: str, batch: int, src_len: int, emb: int, hidden: int, enc: int, lengths: list[int]):
        with torch.random.fork_rng(devices=[]):  # module constructors draw from the global RNG: leave it as it was
            attention = AdditiveAttention(hidden, enc, attn_dim=5)
            cell = nn.GRUCell(emb + enc, hidden)
            out = nn.Linear(hidden + enc + emb, 7)
        with torch.no_grad():
            for module in (attention, cell, out):
                for p in module.parameters():
                    p.copy_(0.5 * _randn(g, *p.shape))  # explicit weights; v_a nonzero so attention is not uniform
        args = (
            _randn(g, batch, emb),
            _randn(g, batch, hidden),
            _randn(g, batch, src_len, enc),
            padding_mask(torch.tensor(lengths), src_len),
            attention,
            cell,
            out,
        )
        return Case(description, args)

    return [
        case("batch 3, src_len 4, emb_dim = hidden_dim = enc_dim = 4, padding", 3, 4, 4, 4, 4, [4, 2, 3]),
        case("batch 2, src_len 5, emb_dim 3, hidden_dim 6, enc_dim 8, padding", 2, 5, 3, 6, 8, [5, 2]),
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
    "the readout input is concatenated in the wrong order. The output layer was built for "
    "[s_t; c_t; E y_{t-1}]: `torch.cat([new_state, context, embedded], dim=-1)`."
)

DECODER_STEP = Exercise(
    name="decoder_step",
    lesson=LESSON,
    params=("embedded", "state", "annotations", "mask", "attention", "cell", "out"),
    returns=(("batch", "vocab"), ("batch", "hidden_dim"), ("batch", "src_len")),
    reference=_decoder_step_reference,
    make_cases=_decoder_step_cases,
    output_names=("logits", "new_state", "weights"),
    variants=(
        Variant(
            "the context used for the output comes from the new state s_t (Luong's order). In Bahdanau's "
            "decoder the context c_t is computed once, from the previous state s_{t-1}, before the GRU update, "
            "and the same c_t feeds both the GRU and the output layer.",
            _luong_order,
        ),
        Variant(
            "the GRU input is concatenated in the wrong order. The cell was built for [E y_{t-1}; c_t]: "
            "`torch.cat([embedded, context], dim=-1)`.",
            _step_with(_cat("c", "e"), _cat("s_t", "c", "e")),
        ),
        *(
            Variant(_READOUT_ORDER, _step_with(_cat("e", "c"), _cat(*order)))
            for order in itertools.permutations(("s_t", "c", "e"))
            if order != ("s_t", "c", "e")
        ),
        Variant(
            "the output layer reads the previous state s_{t-1}. Predict y_t from the new state: [s_t; c_t; E y_{t-1}].",
            _step_with(_cat("e", "c"), _cat("s", "c", "e")),
        ),
        Variant(
            "you returned the previous state s_{t-1}. Return the new state s_t that the GRU cell computed: the "
            "next step starts from it.",
            _step_with(_cat("e", "c"), _cat("s_t", "c", "e"), returned_state="old"),
        ),
        Variant(
            "the attention gives weight to padding: pass the mask, `attention(state, annotations, mask)`.",
            _step_with(_cat("e", "c"), _cat("s_t", "c", "e"), use_mask=False),
        ),
        Variant(
            "the GRU input has the previous state where the context c_t belongs. The input is "
            "[E y_{t-1}; c_t]; the state goes in as the cell's second argument.",
            _step_with(_cat("e", "s"), _cat("s_t", "c", "e")),
        ),
    ),
    hint="Three lines, in Bahdanau's order: `context, weights = attention(state, annotations, mask)` (from "
    "s_{t-1}); `new_state = cell(torch.cat([embedded, context], -1), state)`; "
    "`logits = out(torch.cat([new_state, context, embedded], -1))`.",
)
