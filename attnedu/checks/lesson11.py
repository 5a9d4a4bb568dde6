"""Checks for the exercises of lesson 11 (real attention heads).

Attention weights are (batch, heads, query_len, key_len), each row a softmax over the keys; ``real`` (batch, seq_len)
is True at real tokens. As BertEncoder computes them, padding keys get weight exactly 0, and the rows of padding
queries are still distributions over the real keys (garbage that a statistic must leave out). Positions count from 0.
The references are the package's (``attnedu.heads.previous_token_score``, ``attention_entropy``,
``attnedu.pretrained.gpt2_attention_weights``). Batch, heads and lengths differ from each other so that a reduction
over the wrong axis shows. The known-wrong variants include off-by-ones in both directions: the key two back and the
query itself; the real queries counted one too many and one too few; GPT-2's fused columns shifted by one either way.
The learner's functions may not run ``attnedu.heads`` or ``attnedu.pretrained`` (``forbidden``). Exercise 5,
``repeat_loss_without``, runs small untrained ``AttentionOnlyTransformer`` models with heads removed; its prediction
(the loss of the lesson's trained model with layer-1 heads removed) is compared in the notebook with the ranges of
``benchmarks/calibration11.md``.
"""

from __future__ import annotations

import math

import torch

from ..heads import PREDICTION_MARGIN, attention_entropy, prefix_matching_score, previous_token_score, repeat_losses
from ..masks import padding_mask
from ..pretrained import gpt2_attention_weights
from ..tasks import repeated_tokens
from ..transformer import AttentionOnlyTransformer
from .calling import attempt as _attempt
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


def _previous_by_keys(weights, real):
    """A variant: A[i, i - 1] counted where key i - 1 is real (the mask shifted the wrong way)."""
    below = torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1)
    counted = real[:, :-1].to(weights.dtype)
    return (below * counted[:, None, :]).sum(-1) / counted.sum(-1).clamp(min=1)[:, None]


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
            "you counted the queries whose previous *key* is real, not the queries that are real: the mask was taken "
            "from positions 0 .. seq_len - 2 instead of 1 .. seq_len - 1. The first padding query (at the sentence's "
            "length) has a real previous token, so its garbage row got counted; this shows in padded sentences only. "
            "A query i counts when query i itself is real.",
            lambda w, r: _previous_by_keys(w, r),
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


def _entropy(weights, real, *, log=torch.log, sign=-1.0, ignore_padding=False, total=False, axis=-1, count_shift=0,
             mean_keys=False):  # fmt: skip
    terms = torch.where(weights > 0, weights * log(weights.clamp(min=1e-30)), torch.zeros(()))
    per_query = sign * (terms.mean(axis) if mean_keys else terms.sum(axis))  # (batch, heads, n)
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
            "you averaged the terms A ln A over the keys instead of summing them: your values are the reference "
            "divided by seq_len, the number of keys in a row (padding keys included), so the factor changes with the "
            "length. The entropy of a row is the sum over its keys; only the queries are averaged.",
            lambda w, r: _entropy(w, r, mean_keys=True),
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


def _gpt2_reshaped(c_attn, c_proj, *, transpose_in=True):
    """A variant: the fused matrix reshaped to (layers, 3, d_model, d_model) instead of split along its columns."""
    layers, d_model = c_proj.shape[0], c_proj.shape[-1]
    W_q, W_k, W_v = c_attn.reshape(layers, 3, d_model, d_model).unbind(1)
    fix = (lambda m: m.mT) if transpose_in else (lambda m: m)
    return fix(W_q), fix(W_k), fix(W_v), c_proj.mT


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
            "you cut c_attn into three by reshaping it to (layers, 3, d_model, d_model): a reshape reads the entries "
            "row by row, and each row of c_attn holds one input feature's weights for all three matrices side by "
            "side, so your blocks mix rows of W_q, W_k and W_v. The three blocks lie side by side along the last "
            "axis: cut that axis into three slices of d_model columns.",
            lambda a, p: _gpt2_reshaped(a, p),
            lambda a, p: _gpt2_reshaped(a, p, transpose_in=False),
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

# --------------------------------------------------------------------------------------------
# repeat_loss_without (exercise 5: predict, then measure, the loss on the repeat with heads removed)
# --------------------------------------------------------------------------------------------


def _repeat_cases() -> list[Case]:
    g = generator(114)

    def case(batch, period, vocab, d_model, heads, layers, removed, tags, seed, note=""):
        model = AttentionOnlyTransformer(vocab, d_model, heads, layers, 2 * period, seed=seed)
        model.eval()
        tokens, _ = repeated_tokens(batch, period, 2 * period, vocab, g)
        description = (f"{batch} sequence(s) of a block of {period} repeated once, {layers} layer(s) x {heads} heads, "
                       f"removed {removed}")  # fmt: skip
        return Case(description + (f"; {note}" if note else ""), (model, tokens, removed), tags)

    return [
        case(5, 5, 12, 8, 2, 2, [(0, 1)], kinds(), seed=1),
        case(1, 4, 10, 8, 2, 3, [(1, 0)], kinds(ONE), seed=2),
        case(4, 6, 12, 12, 3, 2, [(1, 2), (0, 0)], kinds(), seed=3, note="two heads removed, in two layers"),
        case(3, 5, 12, 8, 2, 2, [], kinds(), seed=4, note="nothing removed"),
        case(4, 5, 12, 8, 2, 3, [(2, 0), (2, 1)], kinds(), seed=5, note="a whole layer removed"),
        case(3, 40, 50, 16, 4, 2, [(0, 3)], kinds(LARGE), seed=6, note="blocks of 40"),
    ]


def _repeat(model, tokens, removed, *, start=0, swap=False, ignore=False, shift=True, bits=False, part="repeat"):
    """A variant of the repeat's loss: the window of positions moved by ``start``, the gate indices swapped or
    ignored, the prediction compared with its own position's token, in bits, or another part of the sequence."""
    layers, per_layer = len(model.layers), model.layers[0].num_heads
    gates = torch.ones(layers, per_layer)
    for layer, head in [] if ignore else removed:
        if swap:
            layer, head = head, layer
        gates[layer, head] = 0.0
    with torch.no_grad():
        logits, _ = model(tokens, gates)
    period = tokens.shape[1] // 2
    if shift:  # losses[:, t]: token t + 1 predicted at t
        losses = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")
        picked = {"repeat": losses[:, period + start :], "all": losses, "first": losses[:, : period - 1]}[part]
    else:  # losses[:, t]: token t "predicted" at t itself
        losses = torch.nn.functional.cross_entropy(logits.transpose(1, 2), tokens, reduction="none")
        picked = losses[:, period + 1 :]
    loss = picked.mean(-1)
    return loss / math.log(2) if bits else loss


REPEAT_LOSS_WITHOUT = Exercise(
    name="repeat_loss_without",
    lesson=LESSON,
    params=("model", "tokens", "removed"),
    returns=(("sequences",),),
    units=(("sequence", "sequences", "sequence index"),),
    reference=repeat_losses,
    make_cases=_repeat_cases,
    variants=(
        Variant(
            "the heads were not removed: your losses are the intact model's. The model removes head h of layer l "
            "when its head_gates, a (layers, heads) tensor of ones, holds 0 at [l, h].",
            lambda m, t, r: _repeat(m, t, r, ignore=True),
        ),
        Variant(
            "the wrong heads were removed: each (layer, head) pair was read as (head, layer). The gates are indexed "
            "[layer, head], rows are layers.",
            lambda m, t, r: _repeat(m, t, r, swap=True),
        ),
        Variant(
            "off by one: your window starts one position early and includes the prediction of the repeat's first "
            "token. That token follows the block's last token, which occurred only once, so nothing can be copied "
            "there: the repeat's predictions are made at positions period .. 2 period - 2.",
            lambda m, t, r: _repeat(m, t, r, start=-1),
        ),
        Variant(
            "off by one: your window starts one position late and leaves out the prediction made at position "
            "period (of token period + 1), the first one the repeat makes copyable.",
            lambda m, t, r: _repeat(m, t, r, start=1),
        ),
        Variant(
            "you averaged over every position of the sequence, the first block included: the question is the loss "
            "on the repeat only.",
            lambda m, t, r: _repeat(m, t, r, part="all"),
        ),
        Variant(
            "you measured the first block, not the repeat: the repeat's predictions are made at positions period .. "
            "2 period - 2.",
            lambda m, t, r: _repeat(m, t, r, part="first"),
        ),
        Variant(
            "each position's logits were compared with the token at that same position. Position t predicts the "
            "*next* token, t + 1: shift the targets by one against the logits.",
            lambda m, t, r: _repeat(m, t, r, shift=False),
        ),
        Variant(
            "your losses are in bits (times 1 / ln 2 = 1.44): the lesson measures nats, the natural logarithm that "
            "cross_entropy uses.",
            lambda m, t, r: _repeat(m, t, r, bits=True),
        ),
    ),
    hint=(
        "Two steps: run the model with some heads switched off (what does its forward take besides the tokens?), "
        "then pick the positions whose predictions are the repeat's tokens.",
        "gates = ones(layers, heads) with 0 at each removed [layer, head]; logits = model(tokens, gates)[0], "
        "(n, 2 period, vocab). Position t predicts token t + 1; the repeat's predictions are at t = period .. "
        "2 period - 2. loss[b] = mean over those t of -ln softmax(logits[b, t])[tokens[b, t + 1]].",
        "`gates = torch.ones(len(model.layers), model.layers[0].num_heads)`; `for layer, head in removed: "
        "gates[layer, head] = 0.0`; `logits, _ = model(tokens, gates)`; `losses = torch.nn.functional.cross_entropy("
        "logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction='none')`; `return losses[:, period:].mean(-1)` "
        "with `period = tokens.shape[1] // 2`.",
    ),
    forbidden=OWN_CODE,
)

def _two_numbers(predicted_repeat_losses):
    """The learner's prediction as two finite floats, or None, with a line saying what is wrong with it (never
    raises: the learner may return anything)."""
    try:
        value = predicted_repeat_losses()
    except NotImplementedError:
        print("Write your prediction in predicted_repeat_losses above (before measuring), then run this cell again.")
        return None
    except Exception as error:  # noqa: BLE001 - the learner's code may raise anything
        print(f"predicted_repeat_losses raised {type(error).__name__}: {error}. It should just return two numbers.")
        return None
    try:
        numbers = tuple(float(v) for v in value)
    except Exception:  # noqa: BLE001 - not iterable, or items that are not numbers
        numbers = None
    if numbers is None or len(numbers) != 2 or not all(math.isfinite(v) for v in numbers):
        print(f"predicted_repeat_losses returned {value!r}; it should return two finite numbers, (a, b): the loss "
              "on the repeat with both layer-1 heads removed, and with one removed (the mean over the two choices).")
        return None
    return numbers


def _diagnosis(part: str, guess: float, measured: dict) -> str:
    """A line on what a prediction outside the margin typically assumed (exercise 5)."""
    intact, both = measured["intact"], measured["both layer-1 heads"]
    if part == "a":
        if guess < both:  # below the measurement by more than the margin
            return ("without layer 1 nothing reads the earlier occurrence: each key of layer 0 carries only its own "
                    "token and position, so nothing helps predict the repeat beyond guessing")
        return "above what was measured: without layer 1 the model guesses, roughly as a uniform guess would"
    if guess < intact + PREDICTION_MARGIN:
        return "you expected the other layer-1 head to make up for the removed one completely; it does not"
    if guess > both - PREDICTION_MARGIN:
        return "you expected one head's removal to lose (nearly) all the copying; the other head still copies"
    return ("the one-layer model's loss is not the answer here: this model's layer 0 does not do what the one-layer "
            "model's head learned")


def check_removal_effect(measured: dict) -> bool:
    """Exercise 5: whether the course's measurements (``check_removal_prediction``'s return) show the effect the lesson
    relies on: both layer-1 heads removed, the repeat's loss at least 2.75 nats; one removed, between the intact
    model's + 0.6 and 2.75 (thresholds about halfway between these removals' ranges over 8 training seeds,
    benchmarks/calibration11.md). False is the course's failure, never the learner's."""
    both, ones = measured["both layer-1 heads"], [measured["layer-1 head 0"], measured["layer-1 head 1"]]
    return both >= 2.75 and all(measured["intact"] + 0.6 <= one < 2.75 for one in ones)


def check_removal_prediction(predicted_repeat_losses, repeat_loss_without) -> dict:
    """Exercise 5: trains the lesson's two-layer induction model (``heads.train_induction``, seed 0, as the lesson
    does), removes both layer-1 heads, then each alone, and compares the learner's prediction, (a) both removed,
    (b) one removed (the mean of the two single-head removals), with the loss on the repeat that the course measures
    (``heads.repeat_losses``): right when within ``heads.PREDICTION_MARGIN`` nats. The measured losses are printed
    only once the learner has predicted (two finite numbers); what their ``repeat_loss_without`` measures is
    printed beside them. Returns the course's measurements, {"intact": ..., "both layer-1 heads": ...,
    "layer-1 head 0": ..., "layer-1 head 1": ..., "one layer-1 head (mean)": ...}, so that the notebook can assert
    the effect whatever the learner wrote. Never raises on the learner's code."""
    from ..heads import INDUCTION, held_out_repeats, repeat_losses, train_induction

    held_out = held_out_repeats()  # the lesson's: 256 sequences of a 16-token block, repeated once
    model = train_induction(2, held_out, seed=0, every=INDUCTION["steps"], desc="the lesson's two-layer model").model
    removals = {"both layer-1 heads": [(1, 0), (1, 1)], "layer-1 head 0": [(1, 0)], "layer-1 head 1": [(1, 1)]}
    measured = {"intact": repeat_losses(model, held_out).mean().item()}
    measured.update({name: repeat_losses(model, held_out, removed).mean().item() for name, removed in removals.items()})
    measured["one layer-1 head (mean)"] = (measured["layer-1 head 0"] + measured["layer-1 head 1"]) / 2
    guess = _two_numbers(predicted_repeat_losses)
    yours = _attempt(lambda: {name: float(repeat_loss_without(model, held_out, removed).mean())
                              for name, removed in removals.items()})  # fmt: skip
    if yours is None:
        print("Write repeat_loss_without above to see what your function measures.")
    if guess is None:  # the measurements stay hidden until the learner has predicted
        return measured
    print(f"intact: loss on the repeat {measured['intact']:.2f} nats")
    for name in removals:
        line = f"{name} removed: {measured[name]:.2f} nats"
        if yours is not None:
            line += f"; your repeat_loss_without: {yours[name]:.2f}"
        print(line)
    for part, g, name in (("a", guess[0], "both layer-1 heads"), ("b", guess[1], "one layer-1 head (mean)")):
        close = abs(g - measured[name]) <= PREDICTION_MARGIN
        line = (f"({part}) {name}: measured {measured[name]:.2f}, you predicted {g:.2f}: "
                f"{'✅ within' if close else '❌ more than'} {PREDICTION_MARGIN} nats")
        print(line if close else f"{line}. {_diagnosis(part, g, measured)}")
    return measured


EXERCISES = (
    PREVIOUS_TOKEN_SCORE,
    ATTENTION_ENTROPY,
    PREFIX_MATCHING_SCORE,
    GPT2_ATTENTION_WEIGHTS,
    REPEAT_LOSS_WITHOUT,
)
