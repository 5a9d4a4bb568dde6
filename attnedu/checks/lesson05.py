"""Checks for the exercises of lesson 05 (multi-head attention).

Every exercise has test cases with a batch of one, with and without padding (zero vectors after each sentence's
length, or a padding mask over the keys), and with large inputs; in the first case the sizes that a known-wrong
variant needs equal are equal (batch, heads, lengths, head_dim), so that it runs there; the others have sizes that
differ so that a transpose or a wrong reshape shows. multi_head_attention and grouped_query_attention also have a
cross-attention case whose query 1 of sentence 0 holds a NaN feature, as a bug upstream would leave: that query's
output and weights must stay NaN in every head, so that a function which replaces every NaN (``nan_to_num``) fails
with its diagnosis. No case has a query with nothing to attend, so each known-wrong variant is written both ways a
learner treats NaN (every NaN replaced, or none), which differ only there. References come from the package
(``attnedu.multihead.split_heads``, ``merge_heads``, ``attnedu.attention.scaled_dot_product_attention``);
one_offset_accuracy (a prediction: what one head scores on lesson 05's task if it reads one neighbour and guesses
the rest) takes a few numbers per test case, its lengths batched so that a batch of one and sequences of different
lengths (padding) are test cases too; its reference is ``attnedu.tasks.one_offset_accuracy``.
tests/test_checks.py checks that the multi-head reference equals ``attnedu.multihead.MultiHeadAttention`` and
the grouped-query one ``torch.nn.functional.scaled_dot_product_attention(..., enable_gqa=True)``.
"""

from __future__ import annotations

import math

import torch

from ..masks import padding_mask
from ..multihead import grouped_query_attention, merge_heads, multi_head_attention, per_head_weights, split_heads
from ..tasks import one_offset_accuracy
from .exercise import (
    LARGE,
    NAN_INPUT,
    ONE,
    PADDED,
    UNPADDED,
    Case,
    Exercise,
    Layout,
    Variant,
    generator,
    kinds,
    randn,
)

LESSON = "05_multi_head_attention"

# --------------------------------------------------------------------------------------------
# split_heads and merge_heads
# --------------------------------------------------------------------------------------------

# (batch, seq_len, num_heads, head_dim, lengths or None, tags, scale)
_HEAD_SIZES = (
    (3, 3, 3, 3, None, kinds(UNPADDED), 1.0),
    (2, 5, 4, 3, [4, 2], kinds(PADDED), 1.0),
    (1, 4, 2, 5, None, kinds(ONE, UNPADDED), 1.0),
    (1, 6, 3, 2, [3], kinds(ONE, PADDED), 1.0),
    (2, 3, 6, 4, None, kinds(UNPADDED), 1.0),
    (2, 4, 2, 6, [4, 3], kinds(LARGE, PADDED), 1e6),
)


def _head_inputs(seed: int) -> list[tuple]:
    """(x (batch, seq_len, d_model), num_heads, description, tags), zero vectors at padded positions."""
    g = generator(seed)
    inputs = []
    for batch, seq_len, heads, head_dim, lengths, tags, scale in _HEAD_SIZES:
        x = scale * randn(g, batch, seq_len, heads * head_dim)
        note = "no padding"
        if lengths is not None:
            x = x * padding_mask(torch.tensor(lengths), seq_len)[:, :, None]
            note = f"lengths {lengths}, zero vectors at padding"
        if scale != 1.0:
            note += f"; values around ±{scale:.0e}"
        description = f"batch {batch}, seq_len {seq_len}, num_heads {heads}, head_dim {head_dim}, {note}"
        inputs.append((x, heads, description, tags))
    return inputs


def _split_cases() -> list[Case]:
    return [Case(d, (x, h), tags) for x, h, d, tags in _head_inputs(51)]


def _merge_cases() -> list[Case]:
    # contiguous, as `weights @ v` leaves the heads in multi-head attention
    return [Case(d, (split_heads(x, h).contiguous(),), tags) for x, h, d, tags in _head_inputs(52)]


def _split_viewed(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    batch, seq_len, d_model = x.shape
    return x.reshape(batch, seq_len, num_heads, d_model // num_heads)


SPLIT_HEADS = Exercise(
    name="split_heads",
    lesson=LESSON,
    params=("x", "num_heads"),
    returns=(("batch", "num_heads", "seq_len", "head_dim"),),
    reference=split_heads,
    make_cases=_split_cases,
    gradients=True,  # it takes part in training: gradients must flow through it
    layout=lambda args: (Layout(positions=2),),
    variants=(
        Variant(
            "the heads are split in the wrong order: head h got features h, h + num_heads, h + 2 num_heads, ... "
            "(dealt out in turn), as cutting each position's features into (head_dim, num_heads) does. Head h gets "
            "the consecutive features h * head_dim to (h + 1) * head_dim - 1: each position's features are cut into "
            "num_heads slices, in order.",
            lambda x, h: x.reshape(x.shape[0], x.shape[1], -1, h).permute(0, 3, 1, 2),
        ),
        Variant(
            "reshaped straight to (batch, num_heads, seq_len, head_dim) without a transpose: that cuts the flat "
            "(seq_len, d_model) block of each sentence into pieces, mixing positions and heads (head 0 gets the first "
            "positions' features). The features are cut into heads position by position, (batch, seq_len, num_heads, "
            "head_dim), and only then does the heads axis move before the positions.",
            lambda x, h: x.reshape(x.shape[0], h, x.shape[1], -1),
        ),
        Variant(
            "the heads axis is left in place: (batch, seq_len, num_heads, head_dim). It comes before the positions, "
            "(batch, num_heads, seq_len, head_dim), so that each head attends over the whole sequence.",
            _split_viewed,
        ),
        Variant(
            "num_heads and head_dim are swapped: your output has head_dim heads of num_heads features each. "
            "head_dim = d_model // num_heads.",
            lambda x, h: split_heads(x, x.shape[-1] // h),
        ),
        Variant(
            "the transpose swaps the wrong axes, one too low: the batch and the positions, axes 0 and 1. Once the "
            "features are cut into (batch, seq_len, num_heads, head_dim), the axes to swap are 1 and 2, the positions "
            "and the heads.",
            lambda x, h: _split_viewed(x, h).transpose(0, 1),
        ),
        Variant(
            "the transpose swaps the wrong axes, one too high: the heads and their features, axes 2 and 3. Once the "
            "features are cut into (batch, seq_len, num_heads, head_dim), the axes to swap are 1 and 2, the positions "
            "and the heads.",
            lambda x, h: _split_viewed(x, h).transpose(2, 3),
        ),
    ),
    hint=(
        "Each position's d_model features are cut into num_heads consecutive slices, head 0 the first; then the "
        "heads axis goes before the positions.",
        "`x.reshape(batch, seq_len, num_heads, d_model // num_heads)` cuts each position's features (it keeps them "
        "in order); `.transpose(1, 2)` swaps the positions and the heads.",
        "`batch, seq_len, d_model = x.shape`; `return x.reshape(batch, seq_len, num_heads, d_model // "
        "num_heads).transpose(1, 2)`.",
    ),
)


def _merge_from(x: torch.Tensor, moved: torch.Tensor) -> torch.Tensor:
    batch, heads, seq_len, head_dim = x.shape
    return moved.reshape(batch, seq_len, heads * head_dim)


MERGE_HEADS = Exercise(
    name="merge_heads",
    lesson=LESSON,
    params=("x",),
    returns=(("batch", "seq_len", "d_model"),),
    reference=merge_heads,
    make_cases=_merge_cases,
    gradients=True,  # it takes part in training: gradients must flow through it
    layout=lambda args: (Layout(positions=1),),
    variants=(
        Variant(
            "reshaped without moving the heads axis back: (batch, num_heads, seq_len, head_dim) read straight into "
            "(batch, seq_len, d_model) mixes positions and heads. The positions come back before the heads, (batch, "
            "seq_len, num_heads, head_dim), before the last two axes are joined.",
            lambda x: _merge_from(x, x),
        ),
        Variant(
            "the heads are interleaved: feature h + num_heads * i holds feature i of head h, as putting the heads "
            "axis last, (batch, seq_len, head_dim, num_heads), before the reshape does. The heads go side by side, "
            "head 0's features first: (batch, seq_len, num_heads, head_dim) before the reshape.",
            lambda x: _merge_from(x, x.permute(0, 2, 3, 1)),
        ),
        Variant(
            "your output adds the heads up: (batch, seq_len, head_dim). Multi-head attention "
            "concatenates them side by side, giving num_heads * head_dim = d_model features.",
            lambda x: x.sum(dim=1),
        ),
        Variant(
            "your output averages the heads: (batch, seq_len, head_dim). Multi-head attention concatenates them "
            "side by side, giving num_heads * head_dim = d_model features.",
            lambda x: x.mean(dim=1),
        ),
        Variant(
            "the heads are concatenated along the positions: (batch, num_heads * seq_len, head_dim). They go side by "
            "side along the features, one block of head_dim features per head: (batch, seq_len, d_model).",
            lambda x: torch.cat(x.unbind(1), dim=1),
        ),
        Variant(
            "the transpose before the reshape swaps the wrong axes, one too low: the batch and the heads, axes 0 and "
            "1. The axes to swap are 1 and 2, the heads and the positions.",
            lambda x: _merge_from(x, x.transpose(0, 1)),
        ),
        Variant(
            "the transpose before the reshape swaps the wrong axes, one too high: the positions and the features, "
            "axes 2 and 3. The axes to swap are 1 and 2, the heads and the positions.",
            lambda x: _merge_from(x, x.transpose(2, 3)),
        ),
    ),
    hint=(
        "The inverse of split_heads: positions back before heads, then each position's heads side by side, head 0 "
        "first.",
        "`x.transpose(1, 2)` is (batch, seq_len, num_heads, head_dim); then join the last two axes. `reshape`, not "
        "`view`: the transposed tensor is not contiguous.",
        "`batch, num_heads, seq_len, head_dim = x.shape`; `return x.transpose(1, 2).reshape(batch, seq_len, "
        "num_heads * head_dim)`.",
    ),
)

# --------------------------------------------------------------------------------------------
# multi_head_attention and grouped_query_attention
# --------------------------------------------------------------------------------------------


def _attention_case(g, sizes: tuple[int, ...], lengths: list[int], tags, *, self_attention=False, scale=1.0, note=""):
    """Inputs for multi_head_attention (6 sizes) or grouped_query_attention (with num_kv_heads)."""
    batch, query_len, key_len, d_model, num_heads, *kv = sizes
    num_kv_heads = kv[0] if kv else num_heads
    kv_dim = num_kv_heads * (d_model // num_heads)
    query = scale * randn(g, batch, query_len, d_model)
    key = query if self_attention else scale * randn(g, batch, key_len, d_model)
    value = query if self_attention else randn(g, batch, key_len, d_model)
    mask = padding_mask(torch.tensor(lengths), key_len)[:, None, :].expand(-1, query_len, -1).clone()
    weights = [randn(g, d_model, d) / math.sqrt(d_model) for d in (d_model, kv_dim, kv_dim, d_model)]
    args = (query, key, value, mask, *weights, num_heads) + ((num_kv_heads,) if kv else ())
    kind = "self-attention" if self_attention else "cross-attention"
    padding = "no padding" if min(lengths) == key_len else f"key lengths {lengths}"
    heads = f"num_heads {num_heads}" + (f", num_kv_heads {num_kv_heads}" if kv else "")
    description = f"{kind}, batch {batch}, query_len {query_len}, key_len {key_len}, d_model {d_model}, {heads}"
    return Case(f"{description}, {padding}" + (f"; {note}" if note else ""), args, tags)


def _nan_query_case(g, sizes: tuple[int, ...], lengths: list[int]) -> Case:
    """A cross-attention case whose query 1 of sentence 0 has a NaN feature, as a bug upstream would leave: that
    query's output and weights must come out NaN (in every head), every other query's right. Drawn after the other
    cases, so that adding it changed none of theirs."""
    case = _attention_case(
        g,
        sizes,
        lengths,
        kinds(PADDED, NAN_INPUT),
        note="query 1 of sentence 0 has a NaN feature, as a bug upstream would leave: its output and its weights in "
        "every head must come out NaN (a bug must show), every other query's right",
    )
    case.args[0][0, 1, 0] = float("nan")
    return case


def _multi_head_cases() -> list[Case]:
    g = generator(53)
    cases = [
        _attention_case(g, (3, 3, 3, 9, 3), [3, 1, 2], kinds(PADDED)),
        _attention_case(g, (2, 4, 5, 12, 3), [5, 2], kinds(PADDED)),
        _attention_case(g, (1, 3, 3, 8, 2), [3], kinds(ONE, UNPADDED), self_attention=True),
        _attention_case(g, (1, 2, 6, 6, 3), [4], kinds(ONE, PADDED)),
        _attention_case(g, (2, 5, 3, 8, 4), [3, 3], kinds(UNPADDED)),
        _attention_case(
            g,
            (2, 3, 4, 8, 2),
            [4, 3],
            kinds(LARGE, PADDED),
            scale=20.0,
            note="inputs around ±20, scores in the hundreds",
        ),
    ]
    return [*cases, _nan_query_case(g, (2, 3, 4, 8, 2), [4, 3])]


def _grouped_query_cases() -> list[Case]:
    g = generator(54)
    cases = [
        _attention_case(g, (4, 3, 3, 12, 4, 2), [3, 1, 2, 3], kinds(PADDED)),
        _attention_case(g, (2, 4, 5, 12, 6, 2), [5, 2], kinds(PADDED)),
        _attention_case(g, (1, 3, 3, 8, 4, 1), [3], kinds(ONE, UNPADDED), self_attention=True),
        _attention_case(g, (1, 2, 6, 12, 4, 2), [4], kinds(ONE, PADDED)),
        _attention_case(g, (2, 5, 3, 16, 4, 4), [3, 3], kinds(UNPADDED)),
        _attention_case(
            g,
            (2, 3, 4, 12, 6, 3),
            [4, 3],
            kinds(LARGE, PADDED),
            scale=20.0,
            note="inputs around ±20, scores in the hundreds",
        ),
    ]
    return [*cases, _nan_query_case(g, (2, 3, 4, 12, 6, 3), [4, 3])]


def _heads_with(
    query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads=None, *, split=split_heads, merge=merge_heads,
    scale="head_dim", use_mask=True, mask_axis=True, dim=-1, project_out=True, average=False, tile=False, nan=False,
):  # fmt: skip
    """A known-wrong multi-head (or grouped-query, with num_kv_heads) attention, one choice changed; ``nan=False``
    replaces every NaN of the weights by 0 (``nan_to_num``), ``nan=True`` keeps them (no test case has a query with
    nothing to attend, so zeroing only such rows, found from the mask, is the same as keeping every NaN)."""
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    group = num_heads // num_kv_heads
    q = split(query @ W_q, num_heads)
    k, v = split(key @ W_k, num_kv_heads), split(value @ W_v, num_kv_heads)
    if group > 1:
        k, v = (k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)) if tile else (
            k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1),
        )  # fmt: skip
    divisor = {"head_dim": math.sqrt(q.shape[-1]), "d_model": math.sqrt(query.shape[-1]), "none": 1.0}[scale]
    scores = q @ k.transpose(-2, -1) / divisor
    if use_mask:
        scores = scores.masked_fill(~(mask[:, None] if mask_axis else mask), float("-inf"))
    weights = torch.softmax(scores, dim=dim)
    if not nan:
        weights = weights.nan_to_num(0.0)
    merged = merge(weights @ v)
    return (merged @ W_o if project_out else merged), (weights.mean(dim=1) if average else weights)


def _interleaved_split(x, num_heads):
    return x.reshape(x.shape[0], x.shape[1], -1, num_heads).permute(0, 3, 1, 2)


def _unmoved_merge(x):
    return x.reshape(x.shape[0], x.shape[2], -1)


def _variants(grouped: bool) -> tuple[Variant, ...]:
    def v(diagnosis: str, **changes) -> Variant:
        """The mistake written both ways a learner treats NaN: every NaN replaced by 0, or kept."""

        def way(nan):
            def fn(*args):
                return _heads_with(*args, nan=nan, **changes)

            return fn

        return Variant(diagnosis, way(False), way(True))

    shared = (
        v(
            "the output projection W_o is missing: your output is the merged heads. MultiHead = Concat(head_1, ..., "
            "head_h) W_o: the merged heads still go through W_o.",
            project_out=False,
        ),
        v(
            "your scores are divided by sqrt(d_model); each head's dot products have head_dim = d_model // num_heads "
            "terms, so each head divides by sqrt(head_dim).",
            scale="d_model",
        ),
        v("the scale is missing: each head's scores are divided by sqrt(head_dim) before the softmax.", scale="none"),
        v(
            "the heads are split in the wrong order: head h got features h, h + num_heads, ... (dealt out in turn). "
            "Head h gets the consecutive features h * head_dim to (h + 1) * head_dim - 1 of each projected position.",
            split=_interleaved_split,
        ),
        v(
            "the projected inputs were reshaped straight to (batch, num_heads, seq_len, head_dim), without the "
            "transpose, which mixes positions and heads. The features are cut into heads position by position, "
            "(batch, seq_len, num_heads, head_dim), and only then does the heads axis move before the positions.",
            split=lambda x, h: x.reshape(x.shape[0], h, x.shape[1], -1),
        ),
        v(
            "the heads were merged without moving the heads axis back, which mixes positions and heads: the positions "
            "come back before the heads, (batch, query_len, num_heads, head_dim), before the reshape to (batch, "
            "query_len, d_model).",
            merge=_unmoved_merge,
        ),
        v(
            "the merge swaps the wrong axes, one too low: the batch and the heads, axes 0 and 1, before the reshape. "
            "The axes to swap are 1 and 2, the heads and the positions.",
            merge=lambda x: x.transpose(0, 1).reshape(x.shape[0], x.shape[2], -1),
        ),
        v(
            "the merge swaps the wrong axes, one too high: the positions and the features, axes 2 and 3, before the "
            "reshape. The axes to swap are 1 and 2, the heads and the positions.",
            merge=lambda x: x.transpose(2, 3).reshape(x.shape[0], x.shape[2], -1),
        ),
        v(
            "the attention gives weight to masked keys, as it does without the mask: in every head, your weights "
            "where the mask is False are not 0. A masked score must be -inf before the softmax, in every head.",
            use_mask=False,
        ),
        v(
            "the mask has no head axis: (batch, query_len, key_len) against scores (batch, num_heads, query_len, "
            "key_len) lines its batch axis up with the heads (it runs only when batch equals num_heads or is 1), so "
            "head h got sentence h's mask. The mask is the same for every head of a sentence: it needs an axis of "
            "size 1 for the heads, after the batch.",
            mask_axis=False,
        ),
        v(
            "softmax over the wrong axis (dim=-2, the queries): each key's weights sum to one over the queries. Each "
            "query's weights are a distribution over the keys, the last axis.",
            dim=-2,
        ),
        v(
            "your weights are averaged over the heads, (batch, query_len, key_len), as torch.nn.MultiheadAttention "
            "returns them by default. Return every head's weights: (batch, num_heads, query_len, key_len).",
            average=True,
        ),
        Variant(
            "every NaN became 0: in the test case whose query 1 of sentence 0 has a NaN feature, that query's "
            "weights (in every head) and output came out 0 where the reference's are NaN, and everything else is "
            "right. A NaN there is the sign of a bug upstream; turned into zeros it would pass for an answer and "
            "training would go on with it. Here every query has a key to attend, so no row of the softmax needs "
            "zeroing: only a row whose mask is all False may be set to 0, found from the mask.",
            lambda *args: _heads_with(*args, nan=False),
        ),
    )
    if not grouped:  # (in grouped-query attention W_k and W_v are not square: `x @ W_k.T` raises)
        return (
            *shared,
            Variant(
                "your projections use the transposed matrices (nn.Linear's convention, x times W transposed). Here "
                "vectors are rows and W_q is (d_model, d_model): a row of features times W_q is its projection, and "
                "the merged heads times W_o the output.",
                lambda q, k, v, m, Wq, Wk, Wv, Wo, h: multi_head_attention(q, k, v, m, Wq.T, Wk.T, Wv.T, Wo.T, h),
                lambda q, k, v, m, Wq, Wk, Wv, Wo, h: tuple(  # and every NaN replaced: a NaN query's row all 0
                    x.nan_to_num(0.0) for x in multi_head_attention(q, k, v, m, Wq.T, Wk.T, Wv.T, Wo.T, h)
                ),
            ),
        )
    return (
        v(
            "query head h used key/value head h % num_kv_heads: the key/value heads were tiled, the whole set "
            "repeated once per group, instead of each key/value head repeated for its own group. Consecutive query "
            "heads share a key/value head: query head h uses key/value head h // group.",
            tile=True,
        ),
        *shared,
    )


MULTI_HEAD_ATTENTION = Exercise(
    name="multi_head_attention",
    lesson=LESSON,
    params=("query", "key", "value", "mask", "W_q", "W_k", "W_v", "W_o", "num_heads"),
    returns=(("batch", "query_len", "d_model"), ("batch", "num_heads", "query_len", "key_len")),
    reference=multi_head_attention,
    make_cases=_multi_head_cases,
    gradients=True,  # it takes part in training: gradients must flow through it
    output_names=("output", "weights"),
    variants=_variants(grouped=False),
    hint=(
        "Project with the full matrices, split into heads, attend in every head at once (the heads axis is just "
        "another batch axis), merge, project with W_o.",
        "`q = split_heads(query @ W_q, num_heads)` and the same for keys and values; scores scaled by "
        "sqrt(head_dim), not sqrt(d_model); the mask is (batch, query_len, key_len): `mask[:, None]` gives it a "
        "head axis. Return the weights of every head.",
        "`scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask[:, None], float('-inf'))`; "
        "`weights = torch.softmax(scores, dim=-1)`; `return merge_heads(weights @ v) @ W_o, weights`.",
    ),
)

GROUPED_QUERY_ATTENTION = Exercise(
    name="grouped_query_attention",
    lesson=LESSON,
    params=("query", "key", "value", "mask", "W_q", "W_k", "W_v", "W_o", "num_heads", "num_kv_heads"),
    returns=(("batch", "query_len", "d_model"), ("batch", "num_heads", "query_len", "key_len")),
    reference=grouped_query_attention,
    make_cases=_grouped_query_cases,
    gradients=True,  # it takes part in training: gradients must flow through it
    output_names=("output", "weights"),
    variants=_variants(grouped=True),
    hint=(
        "Like multi_head_attention, but the keys and values have only num_kv_heads heads (of the same head_dim), "
        "each shared by a group of num_heads // num_kv_heads consecutive query heads.",
        "Split the queries into num_heads heads and the keys and values into num_kv_heads heads. Query head h uses "
        "key/value head h // group: `.repeat_interleave(group, dim=1)` repeats each key/value head for its group "
        "(`.repeat` would interleave the groups instead).",
        "`k = split_heads(key @ W_k, num_kv_heads).repeat_interleave(num_heads // num_kv_heads, dim=1)`, the same "
        "for `v`; then the scores, mask, softmax and merge of multi_head_attention.",
    ),
)

# --------------------------------------------------------------------------------------------
# per_head_weights: one stacked projection as h separate per-head matrices (not in the lesson)
# --------------------------------------------------------------------------------------------


def _per_head_cases() -> list[Case]:
    g = generator(55)

    def case(d_model: int, num_heads: int, tags, scale: float = 1.0, note: str = "") -> Case:
        weight = scale * randn(g, 3 * d_model, d_model)
        description = f"d_model {d_model}, num_heads {num_heads}, head_dim {d_model // num_heads}"
        return Case(description + (f"; {note}" if note else ""), (weight, num_heads), tags)

    return [
        case(4, 2, kinds(), note="head_dim equals num_heads"),
        case(6, 3, kinds()),
        case(3, 1, kinds(ONE), note="a single head: head_dim equals d_model"),
        case(12, 4, kinds()),
        case(8, 4, kinds()),
        case(6, 2, kinds(LARGE), scale=1e30, note="weights around ±1e30"),
    ]


def _heads_from(weight: torch.Tensor, num_heads: int, rows) -> tuple[torch.Tensor, ...]:
    """A known-wrong per_head_weights: ``rows(W, num_heads)`` turns one (d_model, d_model) block of in_proj_weight
    (nn.Linear's layout) into the per-head tensor; the blocks are taken in the order q, k, v."""
    return tuple(rows(block, num_heads) for block in weight.chunk(3))


def _slices(block: torch.Tensor, num_heads: int, *, transpose=True, interleaved=False, columns=False):
    d_model = block.shape[1]
    head_dim = d_model // num_heads
    heads = []
    for i in range(num_heads):
        index = slice(i, None, num_heads) if interleaved else slice(i * head_dim, (i + 1) * head_dim)
        part = block[:, index] if columns else block[index]
        heads.append(part.T if transpose and not columns else part)
    return torch.stack(heads)


_PER_HEAD_SHAPES = (("num_heads", "d_model", "head_dim"),) * 3

PER_HEAD_WEIGHTS = Exercise(
    name="per_head_weights",
    lesson=LESSON,
    params=("in_proj_weight", "num_heads"),
    returns=_PER_HEAD_SHAPES,
    reference=per_head_weights,
    make_cases=_per_head_cases,
    output_names=("W_q", "W_k", "W_v"),
    variants=(
        Variant(
            "your matrices are not transposed: nn.Linear, and so in_proj_weight, keeps a projection as (out_features, "
            "in_features) and computes x W^T. Head i's rows i * head_dim to (i + 1) * head_dim - 1 of the query "
            "block, transposed, give the (d_model, head_dim) matrix that multiplies x from the right.",
            lambda w, h: _heads_from(w, h, lambda b, n: _slices(b, n, transpose=False)),
        ),
        Variant(
            "head i got every num_heads-th row (i, i + num_heads, ...): the heads dealt out in turn. Head i owns the "
            "consecutive output features i * head_dim to (i + 1) * head_dim - 1, as split_heads cuts them.",
            lambda w, h: _heads_from(w, h, lambda b, n: _slices(b, n, interleaved=True)),
        ),
        Variant(
            "the heads were cut from the input features (the columns of in_proj_weight): every head reads the whole "
            "input x and owns a slice of the output features, which are the rows of nn.Linear's weight.",
            lambda w, h: _heads_from(w, h, lambda b, n: _slices(b, n, columns=True)),
        ),
        Variant(
            "each block was reshaped straight to (num_heads, d_model, head_dim), which mixes rows of different output "
            "features: head i's matrix is made of whole rows of the block, rows i * head_dim to (i + 1) * head_dim - "
            "1 (its output features), transposed.",
            lambda w, h: _heads_from(w, h, lambda b, n: b.reshape(n, b.shape[1], b.shape[1] // n)),
        ),
        Variant(
            "the query, key and value blocks are in the wrong order: in_proj_weight stacks the query projection "
            "first, then the keys', then the values' (rows 0 to d_model - 1 are the queries').",
            lambda w, h: (lambda q, k, v: (k, q, v))(*per_head_weights(w, h)),
            lambda w, h: (lambda q, k, v: (v, k, q))(*per_head_weights(w, h)),
        ),
        Variant(
            "each block was transposed, then cut by a reshape to (num_heads, d_model, head_dim): after the "
            "transpose the rows are the input features, so the reshape cut the input features into heads and gave "
            "each head's matrix rows of several input features. Head i owns whole output features, rows i * head_dim "
            "to (i + 1) * head_dim - 1 of the block in nn.Linear's layout; cut those, then transpose each head's part.",
            lambda w, h: _heads_from(w, h, lambda b, n: b.T.reshape(n, b.shape[1], b.shape[1] // n)),
        ),
        Variant(
            "every head got the whole (d_model, d_model) projection: head i owns only head_dim of its output "
            "features, rows i * head_dim to (i + 1) * head_dim - 1 of the block (transposed).",
            lambda w, h: tuple(b.T.expand(h, -1, -1) for b in w.chunk(3)),
        ),
    ),
    hint=(
        "PyTorch stacks the three projections on top of each other, in nn.Linear's layout (out, in): rows are "
        "output features. Head i owns the output features i * head_dim to (i + 1) * head_dim - 1 of each.",
        "`w_q, w_k, w_v = in_proj_weight.chunk(3)`, each (d_model, d_model) as (out, in). Cut the output rows into "
        "heads with `reshape(num_heads, head_dim, d_model)`, then transpose the last two axes so that head i's "
        "queries are `x @ W_q[i]`.",
        "`d_model = in_proj_weight.shape[1]`; `head_dim = d_model // num_heads`; "
        "`blocks = in_proj_weight.reshape(3, num_heads, head_dim, d_model).transpose(-2, -1)`; `return blocks[0], "
        "blocks[1], blocks[2]`.",
    ),
)

# --------------------------------------------------------------------------------------------
# one_offset_accuracy: predict what one head scores if it reads one neighbour and guesses the rest (not in the lesson)
# --------------------------------------------------------------------------------------------


def _offset_cases() -> list[Case]:
    def case(lengths: list[int], vocab: int, offsets: tuple[int, ...], read: int, tags, note: str = "") -> Case:
        padding = "every sequence as long as the batch" if len(set(lengths)) == 1 else "sequences of different lengths"
        description = f"lengths {lengths} ({padding}), vocab {vocab}, offsets {list(offsets)}, read {read:+d}"
        return Case(description + (f"; {note}" if note else ""), (torch.tensor(lengths), vocab, offsets, read), tags)

    return [
        case([9, 9], 3, (-2, 2, 4), -2, kinds(UNPADDED)),
        case([10, 6, 3], 5, (-3, -1, 2), 2, kinds(PADDED), "offset -3 reaches past the whole of the last sequence"),
        case([7], 4, (-1, 1), 1, kinds(ONE, UNPADDED)),
        case([5, 1], 6, (-2, -1, 1, 2), -1, kinds(PADDED), "a sequence of one token: every answer is beyond the edge"),
        case([8], 2, (3,), 3, kinds(ONE, UNPADDED), "a single offset, the one read"),
        case([10, 2], 4, (-3, 1), -3, kinds(PADDED), "the offset read reaches past the whole of the last sequence"),
        case([100_000, 2_000], 50_000, (-40, -1, 1, 40), 40, kinds(LARGE, PADDED), "long sequences, a big vocabulary"),
    ]


def _reader(lengths, vocab, offsets, read, *, beyond=None, guess=None, sure_edges="all", inside=True):
    """A known-wrong one_offset_accuracy: ``beyond(L, o)`` positions beyond the edge for offset o (default
    min(|o|, L)); a guess right with probability ``guess(vocab)`` (default 1 / vocab); edge answers sure for every
    offset (``"all"``), only the offset read (``"read"``), or none (``"none"``, guessed like the rest); with
    ``inside=False``, the edge is ignored altogether: every answer counts as inside."""
    L = lengths.to(torch.get_default_dtype())
    beyond = beyond or (lambda L, o: torch.clamp(L, max=abs(o)))
    p = (guess or (lambda v: 1 / v))(vocab)
    right = torch.zeros_like(L)
    for o in offsets:
        out = beyond(L, o) if inside else torch.zeros_like(L)
        sure = sure_edges == "all" or (sure_edges == "read" and o == read)
        right = right + (out if sure else out * p) + ((L - out) if o == read else (L - out) * p)
    return right / (L * len(offsets))


ONE_OFFSET_ACCURACY = Exercise(
    name="one_offset_accuracy",
    lesson=LESSON,
    params=("lengths", "vocab", "offsets", "read"),
    returns=(("batch",),),
    reference=one_offset_accuracy,
    make_cases=_offset_cases,
    forbidden=("attnedu.tasks",),  # the learner's own prediction: the package's formula (or its task) earns nothing
    units=(("sequence", "sequences", "batch index"),),
    variants=(
        Variant(
            "the edge answers count as guesses in your formula (or as inside the sequence), at least for the offsets "
            "you do not read. Offset o falls outside the sequence at min(|o|, L) positions, and there the answer "
            "'beyond the edge' is right every time, for every offset, read or not: the position alone gives it away.",
            lambda n, v, o, r: _reader(n, v, o, r, inside=False),
            lambda n, v, o, r: _reader(n, v, o, r, sure_edges="read"),
        ),
        Variant(
            "the guesses are missing: your reader gets nothing right at the offsets it does not read. A guess is "
            "still right one time in vocab, since the tokens are uniform and independent.",
            lambda n, v, o, r: _reader(n, v, o, r, guess=lambda v: 0.0),
        ),
        Variant(
            "your guess is right one time in vocab + 1, as if 'beyond the edge' were one of the possible answers "
            "inside the sequence; there the answer is one of the vocab tokens, each as likely.",
            lambda n, v, o, r: _reader(n, v, o, r, guess=lambda v: 1 / (v + 1)),
        ),
        Variant(
            "the edge answers were guessed like the others: beyond the edge the answer is certain (the position "
            "alone gives it away), for every offset.",
            lambda n, v, o, r: _reader(n, v, o, r, sure_edges="none"),
        ),
        Variant(
            "an offset that reaches past the whole sequence (|o| > L) gets |o| positions beyond the edge in your "
            "count, more than the sequence has: only min(|o|, L) of its L positions can be beyond the edge.",
            lambda n, v, o, r: _reader(n, v, o, r, beyond=lambda L, o: torch.full_like(L, float(abs(o)))),
        ),
        Variant(
            "the offset read reaches past the whole sequence (|read| > L) in one test case, and your count of its "
            "answers inside the sequence, L - |read|, goes below zero there: a count of positions cannot be negative.",
            lambda n, v, o, r: (
                one_offset_accuracy(n, v, o, r)
                + (n.to(torch.get_default_dtype()).clamp(max=abs(r)) - abs(r)) / (n * len(o))
            ),
        ),
        Variant(
            "each offset puts one position beyond the edge in your count; offset o puts |o| of them there (the first "
            "|o| positions for o < 0, the last |o| for o > 0), at most L.",
            lambda n, v, o, r: _reader(n, v, o, r, beyond=lambda L, o: torch.clamp(L, max=1)),
        ),
        Variant(
            "off by one: you counted |o| + 1 positions beyond the edge for offset o. Position i's answer at offset o "
            "is beyond the edge when i + o < 0 or i + o > L - 1: |o| positions (at most L).",
            lambda n, v, o, r: _reader(n, v, o, r, beyond=lambda L, o: torch.clamp(L, max=abs(o) + 1)),
        ),
        Variant(
            "off by one: you counted |o| - 1 positions beyond the edge for offset o. Position i's answer at offset o "
            "is beyond the edge when i + o < 0 or i + o > L - 1: |o| positions (at most L).",
            lambda n, v, o, r: _reader(n, v, o, r, beyond=lambda L, o: torch.clamp(L, max=abs(o) - 1)),
        ),
        Variant(
            "every sequence got the batch's longest length: each sequence has its own L, and its edge positions and "
            "its share of them depend on it.",
            lambda n, v, o, r: one_offset_accuracy(torch.full_like(n, int(n.max())), v, o, r),
        ),
    ),
    hint=(
        "Sort a sequence's L len(offsets) answers into three kinds: beyond the edge, the offset read (inside the "
        "sequence), any other offset (inside). How often is each kind right? The accuracy is the expected share "
        "of right answers.",
        "Offset o falls outside the sequence at min(|o|, L) positions: right every time. The offset read is right "
        "at its other L - min(|read|, L) positions. Every other offset, inside, is right one time in vocab. Sum, "
        "and divide by L len(offsets), for each sequence's own L.",
        "`L = lengths.float()`; `beyond = {o: L.clamp(max=abs(o)) for o in offsets}`; `edge = sum(beyond.values())`; "
        "`read_inside = L - beyond[read]`; `others = sum(L - beyond[o] for o in offsets) - read_inside`; `return "
        "(edge + read_inside + others / vocab) / (L * len(offsets))`.",
    ),
)

EXERCISES = (
    SPLIT_HEADS, MERGE_HEADS, MULTI_HEAD_ATTENTION, GROUPED_QUERY_ATTENTION, PER_HEAD_WEIGHTS, ONE_OFFSET_ACCURACY,
)  # fmt: skip
