"""Checks for the exercises of lesson 11 (real attention heads).

Attention weights are (batch, heads, query_len, key_len), each row a softmax over the keys; ``real`` (batch, seq_len)
is True at real tokens. As BertEncoder computes them, padding keys get weight exactly 0, and the rows of padding
queries are still distributions over the real keys (garbage that a statistic must leave out). Positions count from 0.
The references are the package's (``attnedu.heads.previous_token_score``, ``attention_entropy``,
``attnedu.pretrained.gpt2_attention_weights``). Batch, heads and lengths differ from each other so that a reduction
over the wrong axis shows. The known-wrong variants include off-by-ones in both directions: the key two back and the
query itself; the real queries counted one too many and one too few; GPT-2's fused columns shifted by one either way.
The learner's functions may not run ``attnedu.heads`` or ``attnedu.pretrained`` (``forbidden``).
"""

from __future__ import annotations

import math

import torch

from ..heads import attention_entropy, prefix_matching_score, previous_token_score
from ..masks import padding_mask
from ..pretrained import gpt2_attention_weights
from .exercise import LARGE, ONE, PADDED, UNPADDED, Case, Exercise, Layout, Variant, generator, kinds, randn

LESSON = "11_real_attention_heads"
OWN_CODE = ("attnedu.heads", "attnedu.pretrained")


def _weights(g, batch, heads, seq_len, lengths, sharp=1.0):
    """Softmax weights over each sentence's real keys (padding keys get exactly 0), padding queries included."""
    scores = sharp * randn(g, batch, heads, seq_len, seq_len)
    real = padding_mask(torch.tensor(lengths), seq_len)
    scores = scores.masked_fill(~real[:, None, None, :], float("-inf"))
    return scores.softmax(-1), real


def _weight_cases(seed: int) -> list[Case]:
    g = generator(seed)

    def case(batch, heads, seq_len, lengths, tags, sharp=1.0, note=""):
        weights, real = _weights(g, batch, heads, seq_len, lengths, sharp)
        padded = f", lengths {lengths}" if min(lengths) < seq_len else ", no padding"
        description = f"batch {batch}, heads {heads}, seq_len {seq_len}{padded}"
        return Case(description + (f"; {note}" if note else ""), (weights, real), tags)

    return [
        case(3, 2, 6, [6, 3, 5], kinds(PADDED)),
        case(2, 4, 5, [5, 5], kinds(UNPADDED)),
        case(1, 3, 7, [7], kinds(ONE, UNPADDED)),
        case(1, 2, 6, [4], kinds(ONE, PADDED)),
        case(4, 3, 2, [2, 2, 2, 2], kinds(UNPADDED), note="two tokens each, more sentences than positions"),
        case(2, 3, 8, [8, 2], kinds(PADDED), sharp=6.0, note="sharp heads, a sentence of two tokens"),
        case(2, 2, 300, [300, 211], kinds(LARGE, PADDED), note="long sentences"),
    ]


def _layout(args: tuple) -> tuple[Layout]:
    return (Layout(),)


# --------------------------------------------------------------------------------------------
# previous_token_score
# --------------------------------------------------------------------------------------------


def _offset_score(weights, real, *, offset=-1, count_shift=0, ignore_padding=False, total=False):
    """A variant: A[i, i + offset] averaged over real queries that have such a key; ``count_shift`` moves the
    divisor; ``ignore_padding`` counts every query; ``total`` sums instead of averaging."""
    seq_len = weights.shape[-1]
    if ignore_padding:
        real = torch.ones_like(real)
    i = torch.arange(seq_len)
    j = i + offset
    ok = (j >= 0) & (j < seq_len)
    values = torch.zeros(weights.shape[:-1])
    values[..., ok] = weights[..., i[ok], j[ok]]
    counted = real & ok[None, :] & real.gather(1, j.clamp(0, seq_len - 1)[None].expand_as(real))
    summed = (values * counted[:, None, :]).sum(-1)
    if total:
        return summed
    return summed / (counted.sum(-1) + count_shift).clamp(min=1)[:, None].to(weights.dtype)


PREVIOUS_TOKEN_SCORE = Exercise(
    name="previous_token_score",
    lesson=LESSON,
    params=("weights", "real"),
    returns=(("batch", "heads"),),
    reference=previous_token_score,
    make_cases=lambda: _weight_cases(110),
    layout=_layout,
    variants=(
        Variant(
            "you took the weight on the *next* token, A[i, i + 1] (the diagonal above the main one). The previous "
            "token of query i is key i - 1, on the diagonal below the main one.",
            lambda w, r: _offset_score(w, r, offset=1),
        ),
        Variant(
            "off by one: you took the weight of each query on itself, A[i, i] (the main diagonal). The previous token "
            "is one key to the left, A[i, i - 1].",
            lambda w, r: _offset_score(w, r, offset=0),
        ),
        Variant(
            "off by one: you took the weight two tokens back, A[i, i - 2]. The previous token is A[i, i - 1].",
            lambda w, r: _offset_score(w, r, offset=-2),
        ),
        Variant(
            "padding queries were counted: their rows are garbage (a padding token still attends somewhere). Average "
            "only over queries i >= 1 where `real` is True (and i - 1 is real too).",
            lambda w, r: _offset_score(w, r, ignore_padding=True),
        ),
        Variant(
            "off by one in the count: you divided by the number of real tokens, but query 0 has no previous token. "
            "Divide by the number of real queries i >= 1, one fewer.",
            lambda w, r: _offset_score(w, r, count_shift=1),
        ),
        Variant(
            "off by one in the count: you divided by two fewer than the real tokens. Query 0 has no previous token, so "
            "the count is the number of real tokens minus one.",
            lambda w, r: _offset_score(w, r, count_shift=-1),
        ),
        Variant(
            "you summed over the queries instead of averaging: a sentence's score grows with its length. Divide by the "
            "number of real queries that have a previous token.",
            lambda w, r: _offset_score(w, r, total=True),
        ),
    ),
    hint=(
        "Which entries of a (seq_len, seq_len) weight matrix hold 'query i looks at key i - 1'? And which queries "
        "count?",
        "score[b, h] = mean over the queries i >= 1 with real[b, i] of weights[b, h, i, i - 1]: the diagonal just "
        "below the main one, masked by the real queries, divided by their number (the real length minus one).",
        "`below = torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1)` is (batch, heads, seq_len - 1), entry i - 1 "
        "for query i; `counted = real[:, 1:].float()`; `return (below * counted[:, None]).sum(-1) / "
        "counted.sum(-1)[:, None]`.",
    ),
    forbidden=OWN_CODE,
)

# --------------------------------------------------------------------------------------------
# attention_entropy
# --------------------------------------------------------------------------------------------


def _entropy(weights, real, *, log=torch.log, sign=-1.0, ignore_padding=False, total=False, axis=-1, count_shift=0):
    terms = torch.where(weights > 0, weights * log(weights.clamp(min=1e-30)), torch.zeros(()))
    per_query = sign * terms.sum(axis)  # (batch, heads, n)
    if ignore_padding:
        real = torch.ones_like(real)
    counted = real[:, None, :].to(weights.dtype)
    summed = (per_query * counted).sum(-1)
    if total:
        return summed
    return summed / (counted.sum(-1) + count_shift).clamp(min=1)


ATTENTION_ENTROPY = Exercise(
    name="attention_entropy",
    lesson=LESSON,
    params=("weights", "real"),
    returns=(("batch", "heads"),),
    reference=attention_entropy,
    make_cases=lambda: _weight_cases(111),
    layout=_layout,
    variants=(
        Variant(
            "your entropy is in bits (log base 2): it is the reference times 1 / ln 2 = 1.44. The lesson measures "
            "nats: `torch.log`, the natural logarithm.",
            lambda w, r: _entropy(w, r, log=torch.log2),
        ),
        Variant(
            "the minus sign is missing: sum_j A ln A is <= 0. The entropy is -sum_j A[i, j] ln A[i, j].",
            lambda w, r: _entropy(w, r, sign=1.0),
        ),
        Variant(
            "padding queries were counted: their rows are garbage. Average the entropy only over queries where "
            "`real` is True.",
            lambda w, r: _entropy(w, r, ignore_padding=True),
        ),
        Variant(
            "you summed the entropies of the queries instead of averaging them: divide by the number of real queries.",
            lambda w, r: _entropy(w, r, total=True),
        ),
        Variant(
            "the sum ran over the queries (dim -2), a column of the weights, not over the keys: each *row* of A is a "
            "distribution, and H_i = -sum over keys j of A[i, j] ln A[i, j] sums along that row.",
            lambda w, r: _entropy(w, r, axis=-2),
        ),
        Variant(
            "off by one in the count: you divided by one more than the number of real queries.",
            lambda w, r: _entropy(w, r, count_shift=1),
        ),
        Variant(
            "off by one in the count: you divided by one fewer than the number of real queries.",
            lambda w, r: _entropy(w, r, count_shift=-1),
        ),
    ),
    hint=(
        "Each row of the weights is a distribution over keys: its entropy is one number per query. Which queries "
        "count, and what is 0 ln 0?",
        "H[b, h, i] = -sum_j A[b, h, i, j] ln A[b, h, i, j], with 0 ln 0 = 0 (padding keys have weight 0, and "
        "ln 0 = -inf gives 0 * -inf = NaN); then the mean of H over the queries i where real[b, i] is True.",
        "`terms = torch.where(weights > 0, weights * torch.log(weights), 0.0)`; `H = -terms.sum(-1)`; "
        "`counted = real.float()[:, None, :]`; `return (H * counted).sum(-1) / counted.sum(-1)`.",
    ),
    nan_note="0 ln 0 is NaN in floating point: padding keys have weight exactly 0. Count their terms as 0.",
    forbidden=OWN_CODE,
)

# --------------------------------------------------------------------------------------------
# gpt2_attention_weights (the transfer task: another checkpoint's layout)
# --------------------------------------------------------------------------------------------


def _gpt2_cases() -> list[Case]:
    g = generator(112)

    def case(layers, d_model, tags, note=""):
        c_attn = randn(g, layers, d_model, 3 * d_model) / math.sqrt(d_model)
        c_proj = randn(g, layers, d_model, d_model) / math.sqrt(d_model)
        description = f"{layers} layer(s), d_model {d_model}"
        return Case(description + (f"; {note}" if note else ""), (c_attn, c_proj), tags)

    return [
        case(2, 6, kinds()),
        case(1, 4, kinds(ONE)),
        case(3, 5, kinds(), note="an odd d_model"),
        case(2, 768, kinds(LARGE), note="GPT-2 small's width"),
    ]


def _gpt2(c_attn, c_proj, *, transpose_in=True, transpose_out=True, order=(0, 1, 2), shift=0):
    d_model = c_proj.shape[-1]
    columns = torch.roll(c_attn, shift, dims=-1) if shift else c_attn
    parts = columns.split(d_model, dim=-1)
    W_q, W_k, W_v = (parts[i] for i in order)
    fix = (lambda m: m.mT) if transpose_in else (lambda m: m)
    return fix(W_q), fix(W_k), fix(W_v), c_proj.mT if transpose_out else c_proj


GPT2_ATTENTION_WEIGHTS = Exercise(
    name="gpt2_attention_weights",
    lesson=LESSON,
    params=("c_attn_weight", "c_proj_weight"),
    returns=(("layers", "d_model", "d_model"),) * 4,
    output_names=("W_q", "W_k", "W_v", "W_o"),
    units=(("layer", "layers", "layer index"),) * 4,
    reference=gpt2_attention_weights,
    make_cases=_gpt2_cases,
    variants=(
        Variant(
            "nothing is transposed: GPT-2's Conv1D stores (in_features, out_features), applied as x @ W; nn.Linear "
            "stores (out_features, in_features), applied as x @ W.T. Each of the four matrices is the transpose of "
            "GPT-2's, in its last two axes (the layer axis stays first).",
            lambda a, p: _gpt2(a, p, transpose_in=False, transpose_out=False),
        ),
        Variant(
            "W_q, W_k and W_v are right, but W_o is not transposed: c_proj is a Conv1D too, stored (in, out), and "
            "nn.Linear's W_o is (out, in).",
            lambda a, p: _gpt2(a, p, transpose_out=False),
        ),
        Variant(
            "W_o is right, but W_q, W_k and W_v are not transposed: each slice of c_attn is (in, out); nn.Linear "
            "wants (out, in).",
            lambda a, p: _gpt2(a, p, transpose_in=False),
        ),
        Variant(
            "the three blocks of c_attn are in the wrong order: GPT-2 fuses them as [Q | K | V], queries first, then "
            "keys, then values.",
            lambda a, p: _gpt2(a, p, order=(2, 1, 0)),
            lambda a, p: _gpt2(a, p, order=(1, 0, 2)),
            lambda a, p: _gpt2(a, p, order=(0, 2, 1)),
            lambda a, p: _gpt2(a, p, order=(1, 2, 0)),
            lambda a, p: _gpt2(a, p, order=(2, 0, 1)),
        ),
        Variant(
            "off by one: your slices of c_attn start one column too late (W_q = columns 1 .. d_model). The blocks are "
            "columns 0 .. d_model - 1, d_model .. 2 d_model - 1, 2 d_model .. 3 d_model - 1.",
            lambda a, p: _gpt2(a, p, shift=-1),
        ),
        Variant(
            "off by one: your slices of c_attn start one column too early. The blocks are columns 0 .. d_model - 1, "
            "d_model .. 2 d_model - 1, 2 d_model .. 3 d_model - 1.",
            lambda a, p: _gpt2(a, p, shift=1),
        ),
    ),
    hint=(
        "Two differences from nn.Linear: Conv1D stores (in, out), and c_attn holds three matrices side by side. "
        "Along which axis are they side by side?",
        "c_attn_weight (layers, d_model, 3 d_model): columns 0 .. d_model - 1 are W_q as x @ W, the next d_model "
        "W_k, the last W_v. nn.Linear's weight is the transpose of each, in the last two axes (a leading layer "
        "axis stays where it is).",
        "`W_q, W_k, W_v = c_attn_weight.split(d_model, dim=-1)`, then `.transpose(-2, -1)` each (not `.T`, which "
        "reverses every axis of a 3-D tensor), and `c_proj_weight.transpose(-2, -1)`.",
    ),
    forbidden=OWN_CODE,
)

# --------------------------------------------------------------------------------------------
# prefix_matching_score
# --------------------------------------------------------------------------------------------


def _prefix_cases() -> list[Case]:
    g = generator(113)

    def case(batch, heads, seq_len, period, tags, note=""):
        scores = 3.0 * randn(g, batch, heads, seq_len, seq_len)
        causal = torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
        weights = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        description = f"batch {batch}, heads {heads}, seq_len {seq_len}, period {period}"
        return Case(description + (f"; {note}" if note else ""), (weights, period), tags)

    return [
        case(2, 3, 8, 4, kinds()),
        case(1, 2, 10, 5, kinds(ONE)),
        case(3, 2, 11, 4, kinds(), note="the sequence ends inside the third block"),
        case(4, 3, 6, 2, kinds(), note="more sentences than the period"),
        case(2, 2, 7, 6, kinds(), note="one query in the repeat"),
        case(2, 2, 300, 100, kinds(LARGE), note="three blocks of 100"),
    ]


def _prefix(weights, period, *, offset=1, first=None, total=False, over_all=False):
    """A variant: the weight of query i on key i - period + offset, averaged over queries i >= first."""
    seq_len = weights.shape[-1]
    first = period if first is None else first
    i = torch.arange(first, seq_len)
    j = i - period + offset
    values = weights[..., i, j.clamp(0, seq_len - 1)] * (j >= 0)
    if total:
        return values.sum(-1)
    if over_all:
        return values.sum(-1) / seq_len
    return values.mean(-1)


PREFIX_MATCHING_SCORE = Exercise(
    name="prefix_matching_score",
    lesson=LESSON,
    params=("weights", "period"),
    returns=(("batch", "heads"),),
    reference=prefix_matching_score,
    make_cases=_prefix_cases,
    variants=(
        Variant(
            "off by one: you took the weight on the earlier occurrence of the token itself, A[i, i - period]. An "
            "induction head looks at the token *after* it, which is the one to predict: A[i, i - period + 1].",
            lambda w, p: _prefix(w, p, offset=0),
        ),
        Variant(
            "off by one: you took A[i, i - period + 2], two tokens after the earlier occurrence. The token to predict "
            "follows it directly: A[i, i - period + 1].",
            lambda w, p: _prefix(w, p, offset=2),
        ),
        Variant(
            "off by one: query period - 1 was counted. Its token is the last of the first block and has not occurred "
            "before; the queries of the repeat are i = period, period + 1, ...",
            lambda w, p: _prefix(w, p, first=p - 1),
        ),
        Variant(
            "off by one: query `period` was left out. The repeat starts there: its token occurred at position 0, and "
            "the token after that, at position 1, is what it should attend to.",
            lambda w, p: _prefix(w, p, first=p + 1),
        ),
        Variant(
            "you summed over the queries instead of averaging: divide by the number of queries in the repeat, "
            "seq_len - period.",
            lambda w, p: _prefix(w, p, total=True),
        ),
        Variant(
            "you divided by every query, seq_len, not by the queries of the repeat, seq_len - period: the first "
            "block has nothing to match and is not part of the score.",
            lambda w, p: _prefix(w, p, over_all=True),
        ),
    ),
    hint=(
        "For a query i in the repeat, where did its token occur before, and which key holds the token that followed "
        "it then?",
        "Token i equals token i - period, so the token after its earlier occurrence is at i - period + 1. score = "
        "mean over i = period .. seq_len - 1 of weights[..., i, i - period + 1]: a diagonal below the main one.",
        "`torch.diagonal(weights, offset=1 - period, dim1=-2, dim2=-1)` holds A[period - 1, 0], A[period, 1], ...: "
        "drop its first entry (query period - 1), then `.mean(-1)`.",
    ),
    forbidden=OWN_CODE,
)

EXERCISES = (PREVIOUS_TOKEN_SCORE, ATTENTION_ENTROPY, PREFIX_MATCHING_SCORE, GPT2_ATTENTION_WEIGHTS)
