"""Checks for the exercises of lesson 04 (query, key, value).

scaled_dot_product_attention and cross_attention have test cases with a batch of one, with and without padding,
and with large inputs (scores in the hundreds, where a hand-written exp overflows in float32); query_len differs
from key_len in every case but the first, which is square (every size equal) so that the known-wrong variants that
need two sizes to match run on it; the others have sizes that differ so that a transpose shows.
scaled_dot_product_attention also has a fully masked row, and a case whose inputs hold a NaN in one query that may
attend keys: that query's outputs must stay NaN, so that a function which replaces every NaN (not only the fully
masked rows') fails. Each known-wrong variant is written both ways (every NaN replaced, or the fully masked rows
zeroed), which differ only there. Their reference is
``attnedu.attention.scaled_dot_product_attention``.

The two prediction exercises compute a number the lesson did not: initial_score_std (the spread of the scores at
initialisation, reference ``attnedu.attention.initial_score_std``) and previous_token_scale (how long a query must
be for a head to give the previous position a given weight, reference ``attnedu.attention.query_scale_for_weight``).
Their inputs are a few numbers per test case, batched so that a batch of one and sentences of different lengths
(padding) are test cases too. longer_sentence_weight is a graded prediction (``checks.prediction``): the weight of
exercise 4's head when the sentence doubles and c does not change, predicted before the check measures it.
"""

from __future__ import annotations

import math

import torch

from ..attention import initial_score_std, query_scale_for_weight, scaled_dot_product_attention
from ..masks import padding_mask
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
    Part,
    Variant,
    generator,
    kinds,
    randn,
)
from .mistakes import MASKED_AFTER_SOFTMAX, MASKED_WITH_ZERO
from .prediction import prediction_exercise

LESSON = "04_query_key_value"

# --------------------------------------------------------------------------------------------
# scaled_dot_product_attention
# --------------------------------------------------------------------------------------------


def _sdpa(query, key, value, mask):
    return scaled_dot_product_attention(query, key, value, mask)


def _sdpa_cases() -> list[Case]:
    g = generator(41)

    def case(sizes: tuple[int, ...], mask: torch.Tensor, tags, scale: float = 1.0, note: str = "") -> Case:
        batch, query_len, key_len, head_dim, value_dim = sizes
        args = (
            scale * randn(g, batch, query_len, head_dim),
            scale * randn(g, batch, key_len, head_dim),
            randn(g, batch, key_len, value_dim),
            mask,
        )
        description = (
            f"batch {batch}, query_len {query_len}, key_len {key_len}, head_dim {head_dim}, value_dim {value_dim}"
        )
        return Case(f"{description}, {note}", args, tags)

    def keys_up_to(lengths: list[int], query_len: int, key_len: int) -> torch.Tensor:
        """A padding mask over the keys, the same for every query: (batch, query_len, key_len)."""
        return padding_mask(torch.tensor(lengths), key_len)[:, None, :].expand(-1, query_len, -1).clone()

    def all_true(batch: int, query_len: int, key_len: int) -> torch.Tensor:
        return torch.ones(batch, query_len, key_len, dtype=torch.bool)

    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    square_mask = keys_up_to([4, 2, 3, 4], 4, 4) & torch.stack([causal, causal, torch.ones(4, 4).bool(), causal])
    empty_row = keys_up_to([4, 2], 3, 4)
    empty_row[1, 1] = False  # a query that may attend nothing
    cases = [
        case((4, 4, 4, 4, 4), square_mask, kinds(PADDED), note="key padding, lengths [4, 2, 3, 4], and causal masks"),
        case((2, 4, 5, 3, 6), keys_up_to([5, 2], 4, 5), kinds(PADDED), note="key padding, lengths [5, 2]"),
        case((1, 2, 3, 4, 2), all_true(1, 2, 3), kinds(ONE, UNPADDED), note="nothing masked"),
        case((1, 3, 6, 2, 5), keys_up_to([4], 3, 6), kinds(ONE, PADDED), note="key padding, length 4"),
        case((2, 5, 3, 8, 3), all_true(2, 5, 3), kinds(UNPADDED), note="nothing masked"),
        case(
            (2, 3, 4, 5, 2),
            empty_row,
            kinds(PADDED, EMPTY_ROW),
            note="key lengths [4, 2], and query 1 of sentence 1 may attend nothing: its weights and output must be 0",
        ),
        case(
            (2, 3, 5, 4, 3),
            keys_up_to([5, 3], 3, 5),
            kinds(LARGE, PADDED),
            scale=15.0,
            note="key padding, lengths [5, 3]; queries and keys around ±15, so the scores are in the hundreds",
        ),
    ]
    nan_case = case(
        (2, 3, 4, 3, 2),
        keys_up_to([4, 3], 3, 4),
        kinds(PADDED, NAN_INPUT),
        note="key lengths [4, 3], and query 1 of sentence 0 has a NaN component, as a bug upstream would leave: its "
        "scores, weights and output must come out NaN (a bug must show), every other query's right",
    )  # drawn after the other cases, so that adding it changed none of theirs
    nan_case.args[0][0, 1, 0] = float("nan")
    return [*cases, nan_case]


def _sdpa_layout(args: tuple) -> tuple[Layout | None, ...]:
    mask = args[3]
    queries = ("queries that may attend something", "queries that may attend nothing")
    return (
        Layout(positions=1, real=mask.any(dim=-1), words=queries),  # output: (batch, query_len, value_dim)
        Layout(positions=2, real=mask.any(dim=1), words=("keys some query may attend", "keys no query may attend")),
    )


def _attend(query, key, value, mask, *, scale=None, fill=float("-inf"), dim=-1, nan=False, after=False):
    """A known-wrong attention: divide by ``scale`` (a function of the inputs; default sqrt(head_dim)), fill the
    scores where ``mask`` (already the positions to hide) is True with ``fill``, softmax over ``dim``; with ``after``,
    zero the hidden weights after the softmax instead. Then the NaN: ``nan=False`` replaces every NaN by 0 (the NaN of
    a fully masked row and any other), ``nan="rows"`` zeroes only the rows whose scores are all hidden, as the
    reference does, and ``nan=True`` keeps every NaN."""
    divisor = math.sqrt(query.shape[-1]) if scale is None else scale(query, key, value)
    scores = query @ key.transpose(-2, -1) / divisor
    if mask is not None and not after:
        scores = scores.masked_fill(mask, fill)
    weights = torch.softmax(scores, dim=dim)
    if mask is not None and after:
        weights = weights.masked_fill(mask, 0.0)
    if nan == "rows":
        weights = weights if mask is None else weights.masked_fill(mask.all(dim=-1, keepdim=True), 0.0)
    elif not nan:
        weights = weights.nan_to_num(0.0)
    return weights @ value, weights


def _ways(hide, **options):
    """One mistake written both ways a learner may treat the rows with nothing to attend: every NaN replaced by 0, or
    only those rows zeroed. ``hide(mask)`` gives the positions the mistake hides. The two differ only on the test case
    whose inputs hold a NaN."""
    return tuple(
        (lambda q, k, v, m, way=way: _attend(q, k, v, hide(m), nan=way, **options)) for way in (False, "rows")
    )


def _hidden(m):
    return ~m


def _wrong_row_sum(query, key, value, mask):
    """e / e.sum(dim=-1) without keepdim: (batch, query_len) broadcast against the key axis."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    e = torch.exp(scores - scores.max(dim=-1, keepdim=True).values).masked_fill(~mask, 0.0)
    weights = (e / e.sum(dim=-1)).nan_to_num(0.0)
    return weights @ value, weights


_SCALE_MISSING = (
    "the scale is missing: your scores are Q K^T, but scaled dot-product attention divides them by sqrt(head_dim), "
    "the square root of the size of each query and key, before the softmax."
)
_WRONG_AXIS = (
    "softmax over the wrong axis (dim=1, the queries): each key's weights sum to one over the queries. Each query's "
    "weights are a distribution over the keys, the last axis."
)
_INVERTED = (
    "the mask is inverted: the positions it allows got zero weight and the masked ones got all of it (a query the "
    "mask lets see every key gets no weight at all). True means 'may attend': the scores to hide are those where the "
    "mask is False."
)
_NAN_ROW = (
    "a fully masked row gives NaN (0/0: nothing is left to share the weight), and everything else is right. A query "
    "that may attend nothing must get zero weights and a zero output. Which rows those are is known from the mask (a "
    "row that is all False), not from the NaN: replacing every NaN would give the right numbers in those rows, but it "
    "would also hide a NaN that came from a bug elsewhere (one test case has one)."
)
_EVERY_NAN_REPLACED = (
    "every NaN became 0, not only those of the queries that may attend nothing: in the test case whose query 1 of "
    "sentence 0 has a NaN component, that query's weights and output came out 0 where the reference's are NaN, and "
    "everything else is right. A NaN there is the sign of a bug upstream; turned into zeros it would pass for an "
    "answer and training would go on with it. Only the rows whose mask is all False may be set to 0, found from the "
    "mask, whatever the NaN elsewhere."
)

SCALED_DOT_PRODUCT_ATTENTION = Exercise(
    name="scaled_dot_product_attention",
    lesson=LESSON,
    params=("query", "key", "value", "mask"),
    returns=(("batch", "query_len", "value_dim"), ("batch", "query_len", "key_len")),
    reference=_sdpa,
    make_cases=_sdpa_cases,
    gradients=True,  # it takes part in training: gradients must flow through it
    output_names=("output", "weights"),
    layout=_sdpa_layout,
    variants=(
        Variant(
            _SCALE_MISSING,
            *_ways(_hidden, scale=lambda q, k, v: 1.0),
            lambda q, k, v, m: _attend(q, k, v, ~m, scale=lambda q, k, v: 1.0, nan=True),
        ),
        Variant(
            "your scores are divided by head_dim; the scale is its square root, sqrt(head_dim): the variance of "
            "q . k grows like head_dim, so its spread like sqrt(head_dim).",
            *_ways(_hidden, scale=lambda q, k, v: q.shape[-1]),
        ),
        Variant(
            "your scores are divided by sqrt(value_dim), the size of the values; the scale is sqrt(head_dim), the "
            "size of the queries and keys whose dot products make the scores.",
            *_ways(_hidden, scale=lambda q, k, v: math.sqrt(v.shape[-1])),
        ),
        Variant(
            "your scores are divided by sqrt(key_len), the number of keys; the scale is sqrt(head_dim), the size of "
            "each query and key (the last axis of query).",
            *_ways(_hidden, scale=lambda q, k, v: math.sqrt(k.shape[-2])),
        ),
        Variant(
            _WRONG_AXIS,
            *_ways(_hidden, dim=1),
            lambda q, k, v, m: _attend(q, k, v, ~m, dim=1, nan=True),
        ),
        Variant(
            "each row was divided by the wrong row's sum: a sum over the keys that drops its axis has shape (batch, "
            "query_len), which broadcasts against the last two axes of the (batch, query_len, key_len) weights, so in "
            "sentence b the weight of query i on key j was divided by the sum of query j in sentence i (this runs "
            "only when the sizes match, as in the first test case). Each row is divided by its own sum, which needs "
            "the summed axis kept: (batch, query_len, 1).",
            _wrong_row_sum,
        ),
        Variant(
            _INVERTED,
            *_ways(lambda m: m),
            lambda q, k, v, m: _attend(q, k, v, m, nan=True),
        ),
        Variant(
            "your weights are the softmax without the mask: masked positions get weight. A masked score must be -inf "
            "before the softmax, so that its weight is exactly 0.",
            lambda q, k, v, m: _attend(q, k, v, None),
            lambda q, k, v, m: _attend(q, k, v, None, nan=True),
        ),
        Variant(
            MASKED_WITH_ZERO,
            *_ways(_hidden, fill=0.0),
        ),
        Variant(
            MASKED_AFTER_SOFTMAX,
            *_ways(_hidden, after=True),
        ),
        Variant(_NAN_ROW, lambda q, k, v, m: _attend(q, k, v, ~m, nan=True)),
        Variant(_EVERY_NAN_REPLACED, lambda q, k, v, m: _attend(q, k, v, ~m)),
        Variant(
            "a fully masked row gets uniform weights, as when the masked scores are a large negative number such as "
            "-1e9, which is still finite: with every score in the row equal, each key gets the same share. A query "
            "that may attend nothing must get zero weights and output (masked scores -inf, then the rows where the "
            "mask is all False set to 0).",
            lambda q, k, v, m: _attend(q, k, v, ~m, fill=-1e9),
            lambda q, k, v, m: _attend(q, k, v, ~m, fill=-1e9, nan=True),  # no NaN to replace: a -1e9 row is not 0/0
        ),
        Variant(
            "your output averages the keys, not the values (which runs only when value_dim equals head_dim). The keys "
            "decide the weights; the values are what gets averaged, so the output has value_dim features.",
            lambda q, k, v, m: (lambda o, w: (w @ k, w))(*_sdpa(q, k, v, m)),
            lambda q, k, v, m: (lambda o, w: (w @ k, w))(*_attend(q, k, v, ~m)),
        ),
        Variant(
            "your weights are transposed: the scores are K Q^T, (batch, key_len, query_len), one row per key. Each "
            "query asks every key: the scores are Q K^T, one row per query.",
            lambda q, k, v, m: _attend(k, q, v, ~m.transpose(-2, -1)),
            lambda q, k, v, m: _attend(k, q, v, ~m.transpose(-2, -1), nan="rows"),
        ),
    ),
    hint=(
        "Four steps: scores Q K^T, divided by the square root of the keys' size; masked scores to -inf; a softmax "
        "over the keys; the weighted sum of the values. Then a query whose mask row is all False.",
        "`scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])` (head_dim, not the length); "
        "`scores.masked_fill(~mask, float('-inf'))`; `torch.softmax(..., dim=-1)` (over the keys, the last axis). A "
        "row with nothing to attend is 0/0 = NaN: zero those rows only, found with `mask.any(dim=-1, "
        "keepdim=True)`.",
        "`weights = torch.softmax(scores.masked_fill(~mask, float('-inf')), dim=-1)`; `weights = "
        "weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)`; `return weights @ value, weights`.",
    ),
)

# --------------------------------------------------------------------------------------------
# cross_attention
# --------------------------------------------------------------------------------------------


def _cross_attention(target, source, source_lengths, W_Q, W_K, W_V):
    """Queries from the target, keys and values from the padded source, as lesson 04's cross-attention.

    target (batch, tgt_len, d_model), source (batch, src_len, d_model), source_lengths (batch,),
    W_Q, W_K (d_model, head_dim), W_V (d_model, value_dim)
    -> output (batch, tgt_len, value_dim), weights (batch, tgt_len, src_len)."""
    mask = padding_mask(source_lengths, source.shape[1])[:, None, :]  # (batch, 1, src_len): every query alike
    return scaled_dot_product_attention(target @ W_Q, source @ W_K, source @ W_V, mask)


def _cross_attention_cases() -> list[Case]:
    g = generator(42)

    def case(sizes: tuple[int, ...], lengths: list[int], tags, scale: float = 1.0, note: str = "") -> Case:
        batch, tgt_len, src_len, d_model, head_dim, value_dim = sizes
        args = (
            randn(g, batch, tgt_len, d_model),
            scale * randn(g, batch, src_len, d_model),
            torch.tensor(lengths),
            randn(g, d_model, head_dim),
            randn(g, d_model, head_dim),
            randn(g, d_model, value_dim),
        )
        padding = "no padding" if min(lengths) == src_len else f"source lengths {lengths}"
        description = (
            f"batch {batch}, tgt_len {tgt_len}, src_len {src_len}, d_model {d_model}, head_dim {head_dim}, "
            f"value_dim {value_dim}, {padding}"
        )
        return Case(description + (f"; {note}" if note else ""), args, tags)

    cases = [
        case((3, 3, 3, 3, 3, 3), [3, 1, 2], kinds(PADDED)),
        case((2, 4, 6, 5, 3, 2), [6, 3], kinds(PADDED)),
        case((1, 2, 5, 4, 2, 3), [5], kinds(ONE, UNPADDED)),
        case((1, 5, 3, 3, 4, 6), [2], kinds(ONE, PADDED)),
        case((2, 6, 4, 2, 5, 3), [4, 4], kinds(UNPADDED)),
        case(
            (2, 3, 5, 4, 6, 2),
            [5, 4],
            kinds(LARGE, PADDED),
            scale=40.0,
            note="the source around ±40, so the scores are in the hundreds",
        ),
    ]
    # A NaN in a target position (a query), as a bug upstream would leave: that query's weights and output must come
    # out NaN. In the source it would reach every query, or, at padding, be hidden by the mask; drawn after the other
    # cases, so that adding it changed none of theirs.
    nan_case = case(
        (2, 3, 4, 3, 2, 2),
        [4, 3],
        kinds(PADDED, NAN_INPUT),
        note="target position 1 of sentence 0 has a NaN feature, as a bug upstream would leave: that query's weights "
        "and output must come out NaN (a bug must show), every other query's right",
    )
    nan_case.args[0][0, 1, 0] = float("nan")
    return [*cases, nan_case]


def _cross_with(lengths_offset=0, mask="keys", queries="target", keys="source", values="source", scale=True):
    """A known-wrong cross-attention: which sequence gives the queries, keys and values, and which mask; written each
    way a learner may treat the NaN of a row with nothing to attend (a tuple of functions, see :func:`_ways`)."""

    def cross(target, source, source_lengths, W_Q, W_K, W_V, nan=False):
        seqs = {"target": target, "source": source}
        q, k, v = seqs[queries] @ W_Q, seqs[keys] @ W_K, seqs[values] @ W_V
        scores = q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) if scale else 1.0)
        hide = None
        if mask is not None:
            real = torch.arange(k.shape[1])[None, :] < (source_lengths + lengths_offset)[:, None]
            hide = (~real[:, None, :] if mask == "keys" else real[:, None, :]).expand_as(scores)
            scores = scores.masked_fill(hide, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        if nan == "rows":
            weights = weights if hide is None else weights.masked_fill(hide.all(dim=-1, keepdim=True), 0.0)
        elif not nan:
            weights = weights.nan_to_num(0.0)
        return weights @ v, weights

    return tuple((lambda t, s, n, Q, K, V, way=way: cross(t, s, n, Q, K, V, nan=way)) for way in (False, "rows", True))


def _nan_zeroed(outputs: tuple) -> tuple:
    """A cross-attention's (output, weights) with every NaN replaced by 0, as a learner's nan_to_num leaves them."""
    return tuple(x.nan_to_num(0.0) for x in outputs)


def _cross_layout(args: tuple) -> tuple[Layout | None, ...]:
    _, source, source_lengths, *_ = args
    real = padding_mask(source_lengths, source.shape[1])
    return None, Layout(positions=2, real=real, words=("real source positions", "padding positions"))


_ROLES = (
    "the roles are swapped: your queries come from the source and the keys and values from the target. In "
    "cross-attention the target asks (the queries, projected by W_Q) and the source answers (the keys and values, "
    "projected by W_K and W_V)."
)

CROSS_ATTENTION = Exercise(
    name="cross_attention",
    lesson=LESSON,
    params=("target", "source", "source_lengths", "W_Q", "W_K", "W_V"),
    returns=(("batch", "tgt_len", "value_dim"), ("batch", "tgt_len", "src_len")),
    reference=_cross_attention,
    make_cases=_cross_attention_cases,
    gradients=True,  # it takes part in training: gradients must flow through it
    output_names=("output", "weights"),
    layout=_cross_layout,
    variants=(
        Variant(
            "the attention gives weight to padding, as it does without a mask: your weights at source positions j >= "
            "source_lengths[b] are not 0. The source padding mask, built from source_lengths, hides the same keys "
            "from every query, so it needs an axis of size 1 for the queries.",
            *_cross_with(mask=None),
        ),
        Variant(
            "the mask is inverted: the real source positions got zero weight and the padding got all of it (a "
            "sentence without padding has every position hidden). Source position j of sentence b is real when j < "
            "source_lengths[b].",
            *_cross_with(mask="inverted"),
        ),
        Variant(
            "off by one: the first padded source position (j = length) gets weight too, in every padded sentence. "
            "Position j of sentence b is real when j < source_lengths[b], counting from 0.",
            *_cross_with(lengths_offset=1),
        ),
        Variant(
            "off by one: the last real source word (j = length - 1) gets no weight, in every sentence. Position j of "
            "sentence b is real when j < source_lengths[b], counting from 0.",
            *_cross_with(lengths_offset=-1),
        ),
        Variant(
            "this is self-attention over the target: your keys and values come from the target too. In "
            "cross-attention they come from the source, projected by W_K and W_V.",
            *_cross_with(keys="target", values="target", mask=None),
        ),
        Variant(
            "your values come from the target (which runs only when tgt_len equals src_len). The keys and the values "
            "both come from the source: each weight belongs to a source position, and so does the value it "
            "multiplies.",
            *_cross_with(values="target"),
        ),
        Variant(_ROLES, *_cross_with(queries="source", keys="target", values="target", mask=None)),
        Variant(
            "W_Q and W_K are swapped: the queries were projected by W_K and the keys by W_Q. W_Q projects the "
            "sequence that asks (the target), W_K the one that answers (the source).",
            lambda t, s, n, Q, K, V: _cross_attention(t, s, n, K, Q, V),
            lambda t, s, n, Q, K, V: _nan_zeroed(_cross_attention(t, s, n, K, Q, V)),
        ),
        Variant(
            _SCALE_MISSING,
            *_cross_with(scale=False),
        ),
        Variant(
            "your projections use the transposed matrices, as nn.Linear uses its weights (which runs only when "
            "d_model equals head_dim and value_dim). Here vectors are rows and W_Q is (d_model, head_dim): a row of "
            "d_model features times W_Q has head_dim features.",
            lambda t, s, n, Q, K, V: _cross_attention(t, s, n, Q.T, K.T, V.T),
            lambda t, s, n, Q, K, V: _nan_zeroed(_cross_attention(t, s, n, Q.T, K.T, V.T)),
        ),
        Variant(
            "every NaN became 0: in the test case whose target position 1 of sentence 0 has a NaN feature, that "
            "query's weights and output came out 0 where the reference's are NaN, and everything else is right. A "
            "NaN there is the sign of a bug upstream; turned into zeros it would pass for an answer and training "
            "would go on with it. Here every query has real source words to attend, so no row of the softmax needs "
            "zeroing: only a row whose mask is all False may be set to 0, found from the mask.",
            _cross_with()[0],
        ),
    ),
    hint=(
        "The target asks, the source answers: queries from the target, keys and values from the source. Then "
        "exercise 1, with a mask built from the source lengths.",
        "`q = target @ W_Q`, `k = source @ W_K`, `v = source @ W_V` (rows are vectors). The source padding mask "
        "`torch.arange(src_len)[None, :] < source_lengths[:, None]` is (batch, src_len); give it a query axis and "
        "expand it to (batch, tgt_len, src_len).",
        "`real = torch.arange(source.shape[1])[None, :] < source_lengths[:, None]`; `mask = real[:, None, "
        ":].expand(-1, target.shape[1], -1)`; `return scaled_dot_product_attention(target @ W_Q, source @ W_K, "
        "source @ W_V, mask)`.",
    ),
)

# --------------------------------------------------------------------------------------------
# initial_score_std: predict the spread of q . k at initialisation (not in the lesson)
# --------------------------------------------------------------------------------------------


def _initial_score_std(input_std, weight_std, d_model, head_dim):
    return initial_score_std(input_std, weight_std, d_model, head_dim)


def _score_std_cases() -> list[Case]:
    def case(input_std: list[float], weight_std: list[float], d_model: int, head_dim: int, tags, note: str = ""):
        args = (torch.tensor(input_std), torch.tensor(weight_std), d_model, head_dim)
        description = f"input_std {input_std}, weight_std {weight_std}, d_model {d_model}, head_dim {head_dim}"
        return Case(description + (f"; {note}" if note else ""), args, tags)

    return [
        case([2.0, 0.5, 1.0], [0.25, 1.5, 0.1], 6, 6, kinds(), "d_model equals head_dim"),
        case([1.0, 3.0], [0.2, 0.05], 64, 16, kinds()),
        case([1.5], [0.3], 12, 4, kinds(ONE)),
        case(
            [0.5, 2.0, 1.0, 1.0],
            [0.5, 0.1, 1 / math.sqrt(3 * 512), 0.02],
            512,
            64,
            kinds(),
            "the third is torch.nn.Linear's default initialisation",
        ),  # fmt: skip
        case(
            [1e5, 3e4],
            [1e4, 2e4],
            16,
            8,
            kinds(LARGE),
            "the variance of q . k overflows float32 (above 3.4e38); its standard deviation does not",
        ),
    ]


INITIAL_SCORE_STD = Exercise(
    name="initial_score_std",
    lesson=LESSON,
    params=("input_std", "weight_std", "d_model", "head_dim"),
    returns=(("batch",),),
    reference=_initial_score_std,
    make_cases=_score_std_cases,
    variants=(
        Variant(
            "your spread does not grow with head_dim: a score q . k sums head_dim products q_i k_i, so its variance "
            "is head_dim times one product's, and its standard deviation sqrt(head_dim) times.",
            lambda s, w, d, h: d * s**2 * w**2,
        ),
        Variant(
            "your spread grows like head_dim, not sqrt(head_dim): the variance of a sum of head_dim independent "
            "terms is head_dim times one term's; the standard deviation is its square root.",
            lambda s, w, d, h: h * d * s**2 * w**2,
        ),
        Variant(
            "your answer is the variance of q . k, not its standard deviation: in every test case it is the square of "
            "the reference's. The standard deviation is the variance's square root, and it can be written without "
            "ever forming the variance, which overflows on large inputs.",
            lambda s, w, d, h: h * (d * s**2 * w**2) ** 2,
        ),
        Variant(
            "right in exact arithmetic, but your function forms the variance of q . k before its square root, and the "
            "variance overflows float32 (above 3.4e38) where the standard deviation does not. The standard deviation "
            "can be written as a product of factors that never squares that variance.",
            lambda s, w, d, h: torch.sqrt(h * (d * s**2 * w**2) ** 2),
        ),
        Variant(
            "your spread does not grow with d_model: each component of a query, q_i = sum_m x_m W_mi, is a sum of "
            "d_model terms, so its variance is d_model input_std^2 weight_std^2.",
            lambda s, w, d, h: math.sqrt(h) * s**2 * w**2,
        ),
        Variant(
            "standard deviations where variances belong: input_std and weight_std enter your answer to the first "
            "power. The variance of a product of independent zero-mean factors is the product of their variances, so "
            "both enter squared.",
            lambda s, w, d, h: math.sqrt(h) * d * s * w,
        ),
        Variant(
            "your answer is the standard deviation of one query component, sqrt(d_model) input_std weight_std, not of "
            "the score q . k, which multiplies a query by a key and sums head_dim such products.",
            lambda s, w, d, h: math.sqrt(d) * s * w,
        ),
        Variant(
            "d_model and head_dim are swapped: a query component sums d_model terms, so its variance grows like "
            "d_model, and the score sums head_dim products of components, so its standard deviation grows like "
            "sqrt(head_dim). Your answer grows like sqrt(d_model) and head_dim instead.",
            lambda s, w, d, h: math.sqrt(d) * h * s**2 * w**2,
        ),
        Variant(
            "input_std is missing: the inputs' spread enters every query component, Var(x_m W_mi) = input_std^2 "
            "weight_std^2.",
            lambda s, w, d, h: math.sqrt(h) * d * w**2,
        ),
    ),
    hint=(
        "Go one level at a time: first the variance of one component of a query, q_i, then the variance of q . k, a "
        "sum over head_dim components. Only the two facts in the text are needed.",
        "q_i is a sum of d_model terms x_m W_mi, each a product of independent zero-mean factors, so Var(q_i) = "
        "d_model input_std^2 weight_std^2 (and the same for k_i). q . k sums head_dim products q_i k_i, so Var(q . "
        "k) = head_dim Var(q_i)^2.",
        "std(q . k) = sqrt(head_dim) Var(q_i): `return math.sqrt(head_dim) * d_model * input_std**2 * "
        "weight_std**2`, without squaring anything that could overflow first.",
    ),
)

# --------------------------------------------------------------------------------------------
# previous_token_scale: how long a query must be for a head to attend to the previous position (not in the lesson)
# --------------------------------------------------------------------------------------------


def _previous_token_scale(lengths, head_dim, min_weight):
    """The smallest c for each sentence: position i's query c e_{i-1} against one-hot keys, every other real position
    competing with score 0: c = sqrt(head_dim) ln(min_weight (length - 1) / (1 - min_weight))."""
    return query_scale_for_weight(min_weight, lengths - 1, head_dim)


def _previous_token_cases() -> list[Case]:
    def case(lengths: list[int], head_dim: int, min_weight: float, tags, note: str = ""):
        padding = "every sentence as long as the batch" if len(set(lengths)) == 1 else "sentences of different lengths"
        description = f"lengths {lengths} ({padding}), head_dim {head_dim}, min_weight {min_weight}"
        return Case(description + (f"; {note}" if note else ""), (torch.tensor(lengths), head_dim, min_weight), tags)

    return [
        case([6, 6, 6], 6, 0.9, kinds(UNPADDED), "head_dim equals the length"),
        case([12, 5, 8], 16, 0.95, kinds(PADDED)),
        case([10], 16, 0.95, kinds(ONE, UNPADDED)),
        case([3, 9], 64, 0.8, kinds(PADDED)),
        case([2], 4, 0.99, kinds(ONE, UNPADDED), "one competing key"),
        case([40, 40], 1024, 0.999, kinds(LARGE, UNPADDED), "a large head and a weight near 1: c is in the hundreds"),
    ]


PREVIOUS_TOKEN_SCALE = Exercise(
    name="previous_token_scale",
    lesson=LESSON,
    params=("lengths", "head_dim", "min_weight"),
    returns=(("batch",),),
    reference=_previous_token_scale,
    make_cases=_previous_token_cases,
    variants=(
        Variant(
            "sqrt(head_dim) is missing: your c is the score margin a itself, but attention divides q . k by "
            "sqrt(head_dim), so the query must be sqrt(head_dim) times longer to reach that margin.",
            lambda n, h, w: query_scale_for_weight(w, n - 1, 1),
        ),
        Variant(
            "your c is divided by sqrt(head_dim) where it must be multiplied: attention divides the score, c / "
            "sqrt(head_dim), so to reach a margin a the query needs c = sqrt(head_dim) a.",
            lambda n, h, w: query_scale_for_weight(w, n - 1, 1) / math.sqrt(h),
        ),
        Variant(
            "your c grows like head_dim, not sqrt(head_dim): the score is q . k / sqrt(head_dim).",
            lambda n, h, w: query_scale_for_weight(w, n - 1, 1) * h,
        ),
        Variant(
            "off by one: you counted length competitors, the previous key among them. The keys competing with the "
            "previous position are the other length - 1 real positions.",
            lambda n, h, w: query_scale_for_weight(w, n, h),
        ),
        Variant(
            "off by one: you counted length - 2 competitors. Every real position but the previous one competes, the "
            "asking position itself included: length - 1 keys with score 0.",
            lambda n, h, w: math.sqrt(h) * torch.log(w * (n - 2) / (1 - w)),
        ),
        Variant(
            "the competing keys are missing: your c is right only when a single key competes. With m keys at score 0, "
            "each adds its exp(0) = 1 to the softmax's denominator: the weight is exp(a) / (exp(a) + m).",
            lambda n, h, w: query_scale_for_weight(w, torch.ones_like(n), h),
        ),
        Variant(
            "every sentence got the padded batch's length: padding positions may not be attended, so they do not "
            "compete. Use each sentence's own length.",
            lambda n, h, w: query_scale_for_weight(w, torch.full_like(n, int(n.max())) - 1, h),
        ),
        Variant(
            "the factor 1 / (1 - min_weight) is missing, as when the previous key's own exp(a) is left out of the "
            "softmax's denominator: your margin makes exp(a) / m equal min_weight. The denominator sums the "
            "exponentials of every real key, the previous key's included: exp(a) / (exp(a) + m).",
            lambda n, h, w: math.sqrt(h) * torch.log(w * (n - 1).float()),
        ),
        Variant(
            "the factor min_weight is missing: with your margin the previous key's weight is 1 / (2 - min_weight), "
            "more than min_weight, so your c is larger than the smallest one that reaches it. Solving exp(a) / "
            "(exp(a) + m) = min_weight for exp(a) keeps min_weight as a factor.",
            lambda n, h, w: math.sqrt(h) * torch.log((n - 1) / (1 - w)),
        ),
    ),
    hint=(
        "Write the weight on key i - 1 as a softmax over the real keys: its score is c / sqrt(head_dim), every "
        "other real key scores 0. How many others are there?",
        "With a = c / sqrt(head_dim) and m = length - 1 competitors, the weight is exp(a) / (exp(a) + m). Set it "
        "equal to min_weight and solve for a: exp(a) = min_weight m / (1 - min_weight).",
        "`return math.sqrt(head_dim) * torch.log(min_weight * (lengths - 1) / (1 - min_weight))`.",
    ),
)

# --------------------------------------------------------------------------------------------
# longer_sentence_weight: a graded prediction (checks.prediction): exercise 4's head, at twice the length
# --------------------------------------------------------------------------------------------

# Exercise 4's head, built in the notebook for 12 positions, d_k = 16 and a weight of 0.95; then the sentence doubles
LONGER = {"length": 12, "longer": 24, "head_dim": 16, "min_weight": 0.95}
LONGER_MARGIN = 0.01  # full credit within 0.01 of the measurement, half within 0.02


def previous_position_weight(c: float, length: int, head_dim: int) -> float:
    """The weight each position after the first puts on its predecessor, in exercise 4's head: one-hot positions,
    keys k_j = e_j, position i's query c e_{i-1}, scores q . k / sqrt(head_dim) over every position of a sentence of
    ``length`` (the same for every position after the first; the smallest is returned)."""
    previous = torch.diag(torch.ones(length - 1), diagonal=-1)  # row i has a 1 in column i - 1
    queries, keys = c * previous, torch.eye(length)
    weights = torch.softmax(queries @ keys.T / math.sqrt(head_dim), dim=-1)  # (queries, keys)
    return float(weights[torch.arange(1, length), torch.arange(length - 1)].min())


def _longer_sentence_weight() -> tuple[float]:
    """The course's measurement: c chosen for LONGER["length"] positions (query_scale_for_weight), the head run on
    LONGER["longer"] positions."""
    c = float(query_scale_for_weight(LONGER["min_weight"], LONGER["length"] - 1, LONGER["head_dim"]))
    return (previous_position_weight(c, LONGER["longer"], LONGER["head_dim"]),)


def _longer_details(measured: tuple) -> str:
    length, longer, head_dim, weight = LONGER["length"], LONGER["longer"], LONGER["head_dim"], LONGER["min_weight"]
    c = float(query_scale_for_weight(weight, length - 1, head_dim))
    at_length = previous_position_weight(c, length, head_dim)
    return (
        f"c = {c:.2f}, chosen for {length} positions: the weight on the previous position is {at_length:.3f} at "
        f"{length} positions, {measured[0]:.3f} at {longer}."
    )


def _longer_diagnosis(index: int, guess: float, measured: tuple) -> str:
    """What a wrong guess at the weight typically assumed."""
    kept = LONGER["min_weight"]
    if abs(guess - kept) <= LONGER_MARGIN:
        return (
            "you expected the weight to stay where it was: c fixes the score margin a = c / sqrt(d_k), but twice "
            "as many keys now compete, each adding exp(0) = 1 to the softmax's denominator"
        )
    if guess > kept:
        return "above the weight at the shorter length: more competing keys can only take weight away"
    if abs(guess - kept / 2) <= 2 * LONGER_MARGIN:
        return (
            "you halved the weight: the competing keys add to the softmax's denominator, exp(a) / (exp(a) + m), "
            "which roughly doubles its small part m, not the whole"
        )
    return "the weight is exp(a) / (exp(a) + m): a is fixed by c, and m counts the keys that compete"


LONGER_SENTENCE_WEIGHT = prediction_exercise(
    name="longer_sentence_weight",
    lesson=LESSON,
    question=f"the weight on the previous position at {LONGER['longer']} positions, c unchanged",
    parts=(Part("the weight on the previous position", margin=LONGER_MARGIN),),
    measure=_longer_sentence_weight,
    details=_longer_details,
    diagnose=_longer_diagnosis,
    forbidden=("attnedu.attention",),  # a prediction, not a measurement made with the course's attention
    hint=(
        "Keep c, so keep the score margin a = c / sqrt(d_k) of the previous key over every other key. What changes "
        "at twice the length?",
        "The weight is exp(a) / (exp(a) + m), m the number of keys that compete with the previous one. exercise 4 "
        "chose exp(a) = 0.95 m / 0.05 for m = 11; at 24 positions m = 23.",
        "`e_a = 0.95 * 11 / 0.05`; `return e_a / (e_a + 23)`, worked out by hand or in the function.",
    ),
)

EXERCISES = (
    SCALED_DOT_PRODUCT_ATTENTION, CROSS_ATTENTION, INITIAL_SCORE_STD, PREVIOUS_TOKEN_SCALE, LONGER_SENTENCE_WEIGHT,
)  # fmt: skip
