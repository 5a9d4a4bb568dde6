"""Checks for the exercises of lesson 11 (real attention heads).

Attention weights are (batch, heads, query_len, key_len), each row a softmax over the keys; ``real`` (batch, seq_len)
is True at real tokens. Exercises 1 to 3 take the lesson's statistics to a *decoder's* batch: causal weights (query i
sees keys 0 .. i), padding before each sentence's tokens (a batch for generation) or after them; padding keys get
weight exactly 0, and the rows of padding queries are garbage (spread evenly over the keys up to them, what a mask with
a large negative number gives a row whose keys are all padding), which a statistic must leave out. Positions count
from 0. The references are the package's (``attnedu.heads.previous_token_score``, ``attention_entropy``,
``prefix_matching``, ``attnedu.pretrained.gpt2_attention_weights``). Batch, heads and lengths differ from each other
so that a reduction over the wrong axis shows. The known-wrong variants include off-by-ones in both directions: the key
two back and the query itself; the real queries counted one too many and one too few; the key on an earlier occurrence
and two after it; GPT-2's fused columns shifted by one either way. The learner's functions may not run
``attnedu.heads`` or ``attnedu.pretrained`` (``forbidden``). Exercise 2's prediction (the entropy of a causal head
spreading evenly) and exercise 5's (the loss of the lesson's trained model with layer-1 heads removed) are compared in
the notebook (``check_entropy_prediction``, ``check_removal_prediction``).
"""

from __future__ import annotations

import math

import torch

from ..heads import PREDICTION_MARGIN, attention_entropy, prefix_matching, previous_token_score, repeat_losses
from ..masks import padding_mask
from ..pretrained import gpt2_attention_weights
from ..tasks import repeated_tokens
from ..transformer import AttentionOnlyTransformer
from .calling import attempt as _attempt
from .exercise import LARGE, ONE, PADDED, UNPADDED, Case, Exercise, Layout, Variant, generator, kinds, randn

LESSON = "11_real_attention_heads"
OWN_CODE = ("attnedu.heads", "attnedu.pretrained")


def _real(lengths, seq_len, side):
    """(batch, seq_len) bool: each sentence's real tokens, padding after them (``side`` "right") or before ("left")."""
    real = padding_mask(torch.tensor(lengths), seq_len)
    return real.flip(1) if side == "left" else real


def _decoder_weights(g, real, heads, sharp=1.0):
    """A decoder's causal weights on a padded batch: a real query's row is a softmax over the real keys 0 .. i
    (padding keys exactly 0); a padding query's row is garbage, spread evenly over every key 0 .. i."""
    batch, seq_len = real.shape
    scores = sharp * randn(g, batch, heads, seq_len, seq_len)
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
    allowed = causal & real[:, None, None, :]
    on_real = scores.masked_fill(~allowed, float("-inf")).softmax(-1).nan_to_num(0.0)  # padding rows: fixed below
    garbage = causal.float() / causal.sum(-1, keepdim=True)
    return torch.where(real[:, None, :, None], on_real, garbage)


def _weight_cases(seed: int) -> list[Case]:
    g = generator(seed)

    def case(batch, heads, seq_len, lengths, tags, side="right", sharp=1.0, note=""):
        real = _real(lengths, seq_len, side)
        weights = _decoder_weights(g, real, heads, sharp)
        where = {"right": "after", "left": "before"}[side]
        padded = f", lengths {lengths}, padding {where} the tokens" if min(lengths) < seq_len else ", no padding"
        description = f"causal, batch {batch}, heads {heads}, seq_len {seq_len}{padded}"
        return Case(description + (f"; {note}" if note else ""), (weights, real), tags)

    return [
        case(3, 2, 6, [6, 3, 5], kinds(PADDED), side="left", note="a batch for generation"),
        case(3, 2, 6, [6, 3, 5], kinds(PADDED), side="right"),
        case(2, 4, 5, [5, 5], kinds(UNPADDED)),
        case(1, 3, 7, [7], kinds(ONE, UNPADDED)),
        case(1, 2, 6, [4], kinds(ONE, PADDED), side="left"),
        case(4, 3, 2, [2, 2, 2, 2], kinds(UNPADDED), note="two tokens each, more sentences than positions"),
        case(2, 3, 8, [8, 2], kinds(PADDED), side="left", sharp=6.0, note="sharp heads, a sentence of two tokens"),
        case(2, 2, 300, [300, 211], kinds(LARGE, PADDED), side="left", note="long sentences"),
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


def _previous_by_rule(weights, real, *, rule):
    """A variant: A[i, i - 1] averaged over the queries i >= 1 that one half of the rule counts: "keys", those whose
    previous key i - 1 is real (right for padding before the tokens only); "queries", those that are real themselves
    (right for padding after the tokens only)."""
    below = torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1)  # (batch, heads, seq_len - 1): query i at i - 1
    counted = (real[:, :-1] if rule == "keys" else real[:, 1:]).to(weights.dtype)
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
            "you took the weight on the *next* token, A[i, i + 1] (the diagonal above the main one): a causal query "
            "never sees the next token, so that weight is 0 everywhere. The previous token of query i is key i - 1, on "
            "the diagonal below the main one.",
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
            "padding queries were counted: their rows are garbage (a padding token still attends somewhere). A query "
            "counts when it and the token before it are both real tokens of its sentence.",
            lambda w, r: _offset_score(w, r, ignore_padding=True),
        ),
        Variant(
            "you counted every real query i >= 1, the encoder's rule for padding *after* the tokens. With padding "
            "before them (the left-padded sentences), a sentence's first real token has a padding token before it, "
            "whose weight is 0, and it was counted: those sentences' scores come out too low. A query counts when it "
            "and the token before it are both real.",
            lambda w, r: _previous_by_rule(w, r, rule="queries"),
        ),
        Variant(
            "you counted the queries whose previous *key* is real: right when padding comes before the tokens, but "
            "with padding after them the first padding query has a real token before it, and its garbage row was "
            "counted (this shows in the sentences padded after their tokens only). A query counts when it and the "
            "token before it are both real.",
            lambda w, r: _previous_by_rule(w, r, rule="keys"),
        ),
        Variant(
            "off by one in the count: you divided by one more than the number of queries that have a previous token "
            "in their sentence (the sentence's real tokens minus one).",
            lambda w, r: _offset_score(w, r, count_shift=1),
        ),
        Variant(
            "off by one in the count: you divided by one fewer than the number of queries that have a previous "
            "token in their sentence (the sentence's real tokens minus one).",
            lambda w, r: _offset_score(w, r, count_shift=-1),
        ),
        Variant(
            "you summed over the queries instead of averaging: a sentence's score grows with its length. Divide by the "
            "number of queries that have a previous token.",
            lambda w, r: _offset_score(w, r, total=True),
        ),
    ),
    hint=(
        "Which entries of a (seq_len, seq_len) weight matrix hold 'query i looks at key i - 1'? Which queries have "
        "a previous token *in their sentence*, when padding may come before the tokens or after them?",
        "score[b, h] = mean over the queries i >= 1 with real[b, i] and real[b, i - 1] of weights[b, h, i, i - 1]: "
        "the diagonal just below the main one, masked by the pairs (i, i - 1) that are both real, divided by their "
        "number (the real length minus one, wherever the padding is).",
        "`below = torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1)` is (batch, heads, seq_len - 1), entry i - 1 "
        "for query i; `counted = (real[:, 1:] & real[:, :-1]).float()`; `return (below * counted[:, None]).sum(-1) "
        "/ counted.sum(-1)[:, None]`.",
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
        "H[b, h, i] = -sum_j A[b, h, i, j] ln A[b, h, i, j], with 0 ln 0 = 0 (a causal query's later keys and the "
        "padding keys have weight 0, and ln 0 = -inf gives 0 * -inf = NaN); then the mean of H over the queries i "
        "where real[b, i] is True.",
        "`terms = torch.where(weights > 0, weights * torch.log(weights), 0.0)`; `H = -terms.sum(-1)`; "
        "`counted = real.float()[:, None, :]`; `return (H * counted).sum(-1) / counted.sum(-1)`.",
    ),
    nan_note="0 ln 0 is NaN in floating point: a causal query's later keys, and padding keys, have weight exactly 0. "
    "Count their terms as 0.",
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
    """Sentences of token ids that repeat irregularly, as text does (from a small vocabulary, so that a token recurs
    at any distance, several times, or right after itself), padded with id 0 before or after their tokens, and a
    decoder's causal weights on them (``_decoder_weights``). Every sentence holds a repeated token."""
    g = generator(113)

    def case(batch, heads, seq_len, lengths, vocab, tags, side="right", note=""):
        real = _real(lengths, seq_len, side)
        tokens = torch.randint(1, vocab, (batch, seq_len), generator=g)  # 0 is the padding id, never a real token
        for b, n in enumerate(lengths):  # the sentence's last real token repeats its first one: a copy for sure
            first, last = (seq_len - n, seq_len - 1) if side == "left" else (0, n - 1)
            tokens[b, last] = tokens[b, first]
        tokens = tokens.masked_fill(~real, 0)
        weights = _decoder_weights(g, real, heads, sharp=2.0)
        where = {"right": "after", "left": "before"}[side]
        padded = f", lengths {lengths}, padding (id 0) {where} the tokens" if min(lengths) < seq_len else ", no padding"
        description = f"causal, batch {batch}, heads {heads}, seq_len {seq_len}, ids from 1 to {vocab - 1}{padded}"
        return Case(description + (f"; {note}" if note else ""), (weights, tokens, real), tags)

    return [
        case(3, 2, 9, [9, 5, 7], 5, kinds(PADDED), side="right"),
        case(3, 2, 9, [9, 5, 7], 5, kinds(PADDED), side="left", note="a batch for generation"),
        case(2, 3, 8, [8, 8], 4, kinds(UNPADDED)),
        case(1, 2, 10, [10], 4, kinds(ONE, UNPADDED)),
        case(1, 2, 7, [5], 3, kinds(ONE, PADDED), side="left"),
        case(2, 2, 7, [7, 7], 2, kinds(UNPADDED), note="two ids only: tokens that follow themselves, many copies"),
        case(2, 2, 200, [200, 150], 40, kinds(LARGE, PADDED), side="right", note="long sentences"),
    ]


def _prefix(weights, tokens, real, *, shift=1, pick="all", strict=True, average=False, queries="copied",
            padding=False, total=False):
    """A variant of the prefix-matching score: the weight on key s + ``shift`` for the earlier occurrences s of the
    query's token (``pick`` "all", "latest" or "first" of them; ``strict`` False also counts s = i itself), summed
    (or ``average``d over the occurrences), then averaged over the queries with an occurrence (``queries`` "copied")
    or over every real query ("real"); ``padding`` treats padding as real tokens; ``total`` sums over the queries."""
    if padding:
        real = torch.ones_like(real)
    seq_len = tokens.shape[1]
    same = (tokens[:, :, None] == tokens[:, None, :]) & real[:, :, None] & real[:, None, :]  # [b, i, s]
    same &= torch.ones(seq_len, seq_len, dtype=torch.bool).tril(-1 if strict else 0)
    if pick != "all":  # keep one occurrence per query: the latest or the first
        s = torch.arange(seq_len).expand_as(same)
        chosen = torch.where(same, s, -1).amax(-1) if pick == "latest" else torch.where(same, s, seq_len).amin(-1)
        same = same & (s == chosen[..., None])
    on = torch.zeros(weights.shape[:-1])  # (batch, heads, seq_len)
    for offset in range(seq_len):  # occurrence s, key s + shift
        key = offset + shift
        if 0 <= key < seq_len:
            on += weights[..., key] * same[:, None, :, offset]
    found = same.any(-1)
    if average:
        on = on / same.sum(-1).clamp(min=1)[:, None, :]
    counted = (found if queries == "copied" else real).to(weights.dtype)[:, None, :]
    summed = (on * counted).sum(-1)
    return summed if total else summed / counted.sum(-1).clamp(min=1)


PREFIX_MATCHING_SCORE = Exercise(
    name="prefix_matching_score",
    lesson=LESSON,
    params=("weights", "tokens", "real"),
    returns=(("batch", "heads"),),
    reference=prefix_matching,
    make_cases=_prefix_cases,
    variants=(
        Variant(
            "you counted only the most recent earlier occurrence of each query's token. An induction head may share "
            "its weight between the tokens after several earlier occurrences (the lesson's head favoured the oldest); "
            "the score sums the weight after every one of them.",
            lambda w, t, r: _prefix(w, t, r, pick="latest"),
        ),
        Variant(
            "you counted only the first occurrence of each query's token. The score sums the weight on the tokens "
            "after every earlier occurrence.",
            lambda w, t, r: _prefix(w, t, r, pick="first"),
        ),
        Variant(
            "off by one: you took the weight on the earlier occurrences themselves (a duplicate-token head's pattern). "
            "An induction head looks at the token *after* each of them, the one to predict.",
            lambda w, t, r: _prefix(w, t, r, shift=0),
        ),
        Variant(
            "off by one: you took the weight two tokens after each earlier occurrence. The token to predict follows it "
            "directly.",
            lambda w, t, r: _prefix(w, t, r, shift=2),
        ),
        Variant(
            "you divided by every real query, not by the queries whose token occurred before (or you counted a query's "
            "own position as an earlier occurrence of its token, which makes every query count): a query with nothing "
            "to copy is not part of the score.",
            lambda w, t, r: _prefix(w, t, r, queries="real"),
            lambda w, t, r: _prefix(w, t, r, strict=False),
        ),
        Variant(
            "padding was counted as tokens: padding ids repeat each other, so the garbage rows of padding queries got "
            "counted as queries with earlier occurrences (this shows in padded sentences only). Only real queries, "
            "real occurrences and real keys count.",
            lambda w, t, r: _prefix(w, t, r, padding=True),
        ),
        Variant(
            "you averaged the weight over a query's earlier occurrences instead of summing it: a head that splits its "
            "weight between three of them then scores a third of what it puts there. The score is the total weight on "
            "the tokens after the earlier occurrences.",
            lambda w, t, r: _prefix(w, t, r, average=True),
        ),
        Variant(
            "you summed over the queries instead of averaging: divide by the number of queries whose token occurred "
            "before.",
            lambda w, t, r: _prefix(w, t, r, total=True),
        ),
    ),
    hint=(
        "Without blocks there is no period: for each query, which earlier positions hold the same token, and which "
        "keys come right after them? Which queries have any, and which are real?",
        "T[b, i] = { j : 1 <= j <= i, tokens[b, j - 1] == tokens[b, i], and query i, position j - 1 and key j all "
        "real }. score[b, h] = mean over the queries i with T[b, i] not empty of sum_{j in T[b, i]} "
        "weights[b, h, i, j].",
        "`n = tokens.shape[1]`; `same = (tokens[:, :, None] == tokens[:, None, :]) & real[:, :, None] & "
        "real[:, None, :]`; `same &= torch.ones(n, n, dtype=torch.bool).tril(-1)` (earlier only); "
        "`targets = torch.zeros_like(same)`; "
        "`targets[:, :, 1:] = same[:, :, :-1] & real[:, None, 1:]`; `on = (weights * targets[:, None]).sum(-1)`; "
        "`counted = targets.any(-1).float()[:, None]`; `return (on * counted).sum(-1) / counted.sum(-1)`.",
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

def _prediction(function, name: str, count: int, what: str):
    """The learner's prediction, ``function()``, as ``count`` finite floats (one float when ``count`` is 1), or
    None with a line saying what is wrong with it: not written yet, raised, or not ``what`` (never raises: the
    learner may return anything)."""
    try:
        value = function()
    except NotImplementedError:
        print(f"Write your prediction in {name} above (before measuring), then run this cell again.")
        return None
    except Exception as error:  # noqa: BLE001 - the learner's code may raise anything
        print(f"{name} raised {type(error).__name__}: {error}. It should just return {what.split(':')[0]}.")
        return None
    try:
        numbers = (float(value),) if count == 1 else tuple(float(v) for v in value)
    except Exception:  # noqa: BLE001 - not a number, not iterable, or items that are not numbers
        numbers = None
    if numbers is None or len(numbers) != count or not all(math.isfinite(v) for v in numbers):
        print(f"{name} returned {value!r}; it should return {what}.")
        return None
    return numbers[0] if count == 1 else numbers


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
    guess = _prediction(predicted_repeat_losses, "predicted_repeat_losses", 2,
                        "two finite numbers, (a, b): the loss on the repeat with both layer-1 heads removed, and with "
                        "one removed (the mean over the two choices)")  # fmt: skip
    def measure_yours() -> dict:
        # detached: a learner's function run without torch.no_grad() returns a tensor that requires grad
        return {name: float(torch.as_tensor(repeat_loss_without(model, held_out, removed)).detach().mean())
                for name, removed in removals.items()}  # fmt: skip

    yours = _attempt(measure_yours)
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


# --------------------------------------------------------------------------------------------
# Exercise 2's prediction: the entropy of a causal head that spreads its weight evenly
# --------------------------------------------------------------------------------------------

ENTROPY_TOKENS = 8  # the sentence of the prediction: 8 real tokens, no padding
ENTROPY_MARGIN = 0.05  # nats: a prediction this close to the measurement counts as right


def _even_causal_head(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(1, 1, n, n) weights of a causal head spreading each query's weight evenly over keys 0 .. i; real (1, n)."""
    causal = torch.ones(n, n).tril()
    return (causal / causal.sum(-1, keepdim=True))[None, None], torch.ones(1, n, dtype=torch.bool)


def _entropy_diagnosis(guess: float, n: int) -> str:
    """A line on what a prediction outside the margin typically assumed (exercise 2)."""
    if abs(guess - math.log(n)) <= ENTROPY_MARGIN:
        return (f"that is an encoder's head spreading over all {n} tokens, where every query sees {n} keys; a causal "
                "query sees only itself and the keys before it")  # fmt: skip
    if abs(guess - math.lgamma(n + 2) / n) <= ENTROPY_MARGIN:
        return "off by one: query 0 sees one key, itself, so its weights are certain"
    if guess <= ENTROPY_MARGIN:
        return "only a query that sees one key is certain; the others spread their weight over several"
    return ("each query sees its own number of keys, and spreads its weight evenly over them; the head's entropy is "
            "the mean over the queries")


def check_entropy_prediction(predicted_causal_entropy, your_attention_entropy) -> float:
    """Exercise 2: the mean entropy (nats) of a causal head that spreads each query's weight evenly over every key it
    may see, on one sentence of ``ENTROPY_TOKENS`` tokens without padding, as the course's ``attention_entropy``
    measures it, compared with the learner's prediction (right within ``ENTROPY_MARGIN``) and shown beside what the
    learner's ``attention_entropy`` gives. The measurement is printed only once the learner has predicted (one
    finite number). Returns the measurement; never raises on the learner's code."""
    weights, real = _even_causal_head(ENTROPY_TOKENS)
    measured = attention_entropy(weights, real).item()
    guess = _prediction(predicted_causal_entropy, "predicted_causal_entropy", 1, "one finite number, in nats")
    yours = _attempt(lambda: float(_entropy_of(your_attention_entropy, weights, real)))
    if yours is None:
        print("Write attention_entropy above to see what your function measures.")
    if guess is None:  # the measurement stays hidden until the learner has predicted
        return measured
    line = f"a causal head spreading evenly, {ENTROPY_TOKENS} tokens: {measured:.3f} nats"
    print(line + ("" if yours is None else f"; your attention_entropy: {yours:.3f}"))
    close = abs(guess - measured) <= ENTROPY_MARGIN
    verdict = (f"you predicted {guess:.3f}: {'✅ within' if close else '❌ more than'} {ENTROPY_MARGIN} nats")
    print(verdict if close else f"{verdict}. {_entropy_diagnosis(guess, ENTROPY_TOKENS)}")
    return measured


def _entropy_of(fn, weights, real):
    """The learner's entropy of the one sentence, as a number (their function returns (batch, heads) = (1, 1))."""
    return torch.as_tensor(fn(weights, real)).detach().reshape(-1)[0]


EXERCISES = (
    PREVIOUS_TOKEN_SCORE,
    ATTENTION_ENTROPY,
    PREFIX_MATCHING_SCORE,
    GPT2_ATTENTION_WEIGHTS,
    REPEAT_LOSS_WITHOUT,
)
