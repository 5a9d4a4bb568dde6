"""Checks for the exercises of lesson 06 (masking): the additive form of a mask (the one exercise that repeats the
lesson), then three masks the lesson did not show: packed documents, a prefix language model, a window with each
sentence's own global tokens; and a prediction, which outputs the lesson's intervention test moves on packed
documents.

Masks are booleans, True = may attend, rows are queries and columns keys, as everywhere in the course.
Every exercise has test cases with a batch of one, a large one (sequences of hundreds of positions) and, where
padding applies, cases with and without it; the known-wrong variants include an off-by-one in both directions
(the causal diagonal shifted up and down, the end of the prefix one key too far and one too short, the window
one neighbour too narrow and too wide). Batch sizes differ from the sequence lengths so that a transpose shows,
except in one case of each mask built from a (batch, length) tensor, where they are equal on purpose: there a
mask broadcast over the wrong axis has the right shape and only its values give it away (the lesson's silent
broadcast). The learner's function may not run anything from ``attnedu.masks`` (``forbidden``): the exercises ask
for their own code.
"""

from __future__ import annotations

import torch

from ..masks import (
    causal_mask,
    causal_padding_mask,
    document_mask,
    local_global_mask,
    moved_by,
    padding_mask,
    prefix_lm_mask,
    sliding_window_mask,
    to_additive,
)
from .exercise import EMPTY_ROW, LARGE, ONE, PADDED, UNPADDED, Case, Exercise, Layout, Variant, kinds

LESSON = "06_masking"
OWN_CODE = ("attnedu.masks",)  # the exercises ask for the learner's own code: the package's masks earn nothing


def _grid(max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(query index i as a column (max_len, 1), key index j as a row (1, max_len))."""
    positions = torch.arange(max_len)
    return positions[:, None], positions[None, :]


def _keys_real(lengths: torch.Tensor, max_len: int, shift: int = 0) -> torch.Tensor:
    """(batch, 1, max_len): key j is real when j < length + shift."""
    return (torch.arange(max_len)[None, :] < lengths[:, None] + shift)[:, None, :]


def _empty_rows(args: tuple, got) -> str | None:
    """A mask row with no allowed key makes the softmax 0/0 = NaN (a learner-facing property)."""
    if not isinstance(got, torch.Tensor) or got.dtype != torch.bool or got.dim() != 3:
        return None
    empty = ~got.any(dim=-1)  # (batch, query)
    if not bool(empty.any()):
        return None
    b, i = empty.nonzero()[0].tolist()
    return (
        f"{int(empty.sum())} rows of your mask allow no key at all (the first: sentence {b}, query {i}); a softmax "
        "over such a row is 0/0 = NaN, which then spreads through the loss. Every row must keep at least one key."
    )


def _query_layout(args: tuple) -> tuple[Layout]:
    lengths, max_len = args[-2], args[-1]
    return (
        Layout(
            positions=1,
            real=padding_mask(lengths, max_len),
            words=("rows of real queries", "rows of padding queries"),
        ),
    )


# --------------------------------------------------------------------------------------------
# to_additive
# --------------------------------------------------------------------------------------------


def _to_additive_cases() -> list[Case]:
    def case(description: str, mask: torch.Tensor, dtype: torch.dtype, tags) -> Case:
        return Case(f"{description}; dtype {str(dtype).replace('torch.', '')}", (mask, dtype), tags)

    empty_row = torch.tensor([[True, True, False, False], [False, False, False, False], [True, False, True, False]])
    return [
        case(
            "causal + padding masks (batch 2, 4, 4) for lengths [4, 2]",
            causal_padding_mask(torch.tensor([4, 2]), 4),
            torch.float32,
            kinds(PADDED),
        ),
        case(
            "padding masks for 3 sentences of lengths [5, 2, 3], repeated for 4 queries: (3, 4, 5)",
            padding_mask(torch.tensor([5, 2, 3]), 5)[:, None, :].expand(3, 4, 5).clone(),
            torch.float64,
            kinds(PADDED),
        ),
        case(
            "a causal mask (5, 5) for one sentence, (1, 5, 5)",
            causal_mask(5)[None],
            torch.float32,
            kinds(ONE, UNPADDED),
        ),
        case(
            "one sentence of length 4 padded to 6, (1, 1, 1, 6), as SDPA broadcasts over heads and queries",
            padding_mask(torch.tensor([4]), 6)[:, None, None, :],
            torch.float32,
            kinds(ONE, PADDED),
        ),
        case(
            "a causal mask with 4 queries and 6 keys (top-left), 2-D",
            causal_mask(4, 6, align="top-left"),
            torch.float16,
            kinds(UNPADDED),
        ),
        case("a (3, 4) mask whose second row allows nothing", empty_row, torch.float32, kinds(EMPTY_ROW, PADDED)),
        case(
            "causal + padding masks for 4 sentences and 2 heads, (4, 2, 256, 256), lengths [256, 31, 200, 1]",
            causal_padding_mask(torch.tensor([256, 31, 200, 1]), 256)[:, None].expand(4, 2, 256, 256).clone(),
            torch.float32,
            kinds(LARGE, PADDED),
        ),
    ]


def _filled(mask: torch.Tensor, dtype: torch.dtype, blocked: float, allowed: float = 0.0) -> torch.Tensor:
    return torch.full(mask.shape, allowed, dtype=dtype).masked_fill(~mask, blocked)


_FINITE = (
    "blocked entries hold {what} instead of -inf. In a row with an allowed key that still blocks (the weight "
    "underflows to exactly 0), but a fully masked row (nothing allowed, as in the test case with one) then gets "
    "uniform weights, attention spread over padding, where -inf makes the fault visible and the course's masked "
    "softmax gives zeros; and two such masks added together (padding and causal, or a bias such as ALiBi's) can "
    "overflow to -inf or move the blocked scores. Blocked entries must be exactly -inf."
)

TO_ADDITIVE = Exercise(
    name="to_additive",
    lesson=LESSON,
    params=("mask", "dtype"),
    returns=(("the shape of mask",),),
    reference=to_additive,
    make_cases=_to_additive_cases,
    variants=(
        Variant(
            "the mask is inverted: your output is -inf where the boolean mask allows attention (True) and 0 where it "
            "blocks it, so every allowed key is blocked and every blocked key allowed. True means 'may attend': the "
            "additive mask is 0 at the True entries and -inf at the False ones.",
            lambda mask, dtype: _filled(mask, dtype, blocked=0.0, allowed=float("-inf")),
        ),
        Variant(_FINITE.format(what="-1e9"), lambda mask, dtype: _filled(mask, dtype, -1e9)),
        Variant(_FINITE.format(what="-10000"), lambda mask, dtype: _filled(mask, dtype, -1e4)),
        Variant(
            _FINITE.format(what="the dtype's most negative finite number (its finfo minimum)"),
            lambda mask, dtype: _filled(mask, dtype, torch.finfo(dtype).min),
        ),
        Variant(
            "your output is the mask as 0/1 numbers, the booleans converted: 1 where allowed, 0 where blocked. Added "
            "to the scores, that blocks nothing (it raises every allowed score by 1). An additive mask is 0 where "
            "allowed and -inf where blocked.",
            lambda mask, dtype: mask.to(dtype),
        ),
        Variant(
            "blocked entries hold -1 and allowed ones 0 (the mask as numbers, minus one): added to the scores, -1 "
            "hardly changes a weight, so the blocked keys keep most of theirs. Blocked entries must be -inf.",
            lambda mask, dtype: mask.to(dtype) - 1,
        ),
        Variant(
            "allowed entries hold 1 instead of 0 (blocked ones are -inf). Alone that is harmless for the softmax, "
            "which ignores a constant added to every allowed score of a row, but an additive mask is also summed "
            "with other masks and biases (a causal mask, ALiBi's distance penalty), and there the 1 shifts every "
            "score it touches. Allowed entries must be exactly 0.",
            lambda mask, dtype: _filled(mask, dtype, float("-inf"), allowed=1.0),
        ),
        Variant(
            "blocked entries hold +inf instead of -inf: added to a score, +inf makes that key take all the weight "
            "(or NaN, inf - inf, in the softmax). Blocked entries must be -inf, whose exponential is 0.",
            lambda mask, dtype: _filled(mask, dtype, float("inf")),
        ),
        Variant(
            "your output is NaN at every allowed entry: it multiplies by -inf, and 0 * -inf is NaN, not 0. No product "
            "with -inf gives the 0 an allowed entry needs: each entry must be chosen, 0 or -inf, by the mask.",
            lambda mask, dtype: (~mask).to(dtype) * float("-inf"),
        ),
        *(
            Variant(
                "your output is still a boolean tensor (dtype torch.bool). An additive mask is a float tensor of the "
                "requested `dtype`, added to the scores: 0 where the mask is True, -inf where it is False.",
                fn,
            )
            for fn in (lambda mask, dtype: mask.clone(), lambda mask, dtype: ~mask)
        ),
        Variant(
            "your output is always float32, whatever `dtype` asked for, so the float64 and float16 cases fail. The "
            "additive mask is added to the scores, so it must have their dtype, the one the `dtype` argument names.",
            lambda mask, dtype: to_additive(mask),
        ),
    ),
    forbidden=OWN_CODE,
    hint=(
        "Which entries are blocked, True or False ones? Those get -inf, the others 0; and the result must be a new "
        "tensor of the requested dtype, not the boolean mask changed.",
        "Start from zeros of the mask's shape in that dtype, then put -inf where the mask is False (`~mask`). "
        "Choose values rather than multiply: 0 * -inf is NaN.",
        "`torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, float('-inf'))`, or "
        "`torch.where(mask, 0.0, float('-inf')).to(dtype)`.",
    ),
)

# --------------------------------------------------------------------------------------------
# document_mask: several documents packed into one row (a mask the lesson did not show)
# --------------------------------------------------------------------------------------------


def _ids(*runs: tuple[int, int]) -> list[int]:
    """A row of document ids from (id, how many tokens) runs."""
    return [doc for doc, count in runs for _ in range(count)]


def _document_mask_cases() -> list[Case]:
    def case(rows: list[list[int]], tags, note: str) -> Case:
        return Case(note, (torch.tensor(rows),), tags)

    large = [  # past 127 positions: an int8 position wraps around
        _ids(*((d, n) for d, n in enumerate((30, 1, 50, 3, 76)))),
        _ids(*((d, n) for d, n in enumerate((90, 40, 8))), (-1, 22)),
    ]
    return [
        case([_ids((0, 2), (1, 2)), _ids((0, 4)), _ids((0, 1), (1, 1), (2, 2)), _ids((0, 3), (-1, 1))],
             kinds(PADDED), "4 rows of 4 tokens (as many rows as tokens); the last row ends in padding (id -1)"),
        case([_ids((0, 3), (1, 2), (2, 3))], kinds(ONE, UNPADDED), "one row of 3 documents of lengths 3, 2, 3"),
        case([_ids((0, 2), (1, 4), (-1, 3))], kinds(ONE, PADDED), "one row: documents of 2 and 4 tokens, 3 of padding"),
        case([_ids((0, 5), (1, 1)), _ids((0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 1))], kinds(UNPADDED),
             "2 rows of 6: a document of 5 and one of 1; six documents of one token each"),
        case([_ids((7, 3), (3, 2)), _ids((2, 1), (9, 4))], kinds(UNPADDED),
             "2 rows of 5 whose ids are any numbers (7, 3; 2, 9): only equal or not matters"),
        case([_ids((0, 6), (-1, 1)), _ids((0, 2), (1, 3), (-1, 2)), _ids((0, 7))], kinds(PADDED),
             "3 rows of 7, two ending in padding (id -1)"),
        case(large, kinds(LARGE, PADDED), "2 rows of 160 tokens: 5 documents; 3 documents and 22 of padding"),
    ]  # fmt: skip


def _doc(ids, diagonal=0, causal=True, documents=True, relation="=="):
    """A variant: same document (or the ids compared by ``relation``) AND j <= i + diagonal."""
    length = ids.shape[1]
    i, j = _grid(length)
    if not documents:
        same = torch.ones(ids.shape[0], length, length, dtype=torch.bool)
    elif relation == "==":
        same = ids[:, :, None] == ids[:, None, :]
    else:  # a key in the same or an earlier document: ids compared with <=
        same = ids[:, None, :] <= ids[:, :, None]
    return same & (j <= i + diagonal)[None] if causal else same


def _doc_rows_of_the_batch(ids):
    """The rows of the batch compared with each other, (batch, batch, length): a shape the cases with as many rows as
    tokens cannot tell from the right one."""
    length = ids.shape[1]
    return (ids[:, None] == ids[None, :]) & causal_mask(length)


def _doc_padding_blocked(ids):
    real = ids >= 0
    return _doc(ids) & real[:, None, :] & real[:, :, None]


def _doc_layout(args: tuple) -> tuple[Layout]:
    (ids,) = args
    return (Layout(positions=1, real=ids >= 0, words=("rows of real tokens", "rows of padding tokens")),)


DOCUMENT_MASK = Exercise(
    name="document_mask",
    lesson=LESSON,
    params=("document_ids",),
    returns=(("batch", "length", "length"),),
    reference=document_mask,
    make_cases=_document_mask_cases,
    layout=_doc_layout,
    properties=lambda args, got: _empty_rows(args, got),
    forbidden=OWN_CODE,
    variants=(
        Variant(
            "the mask is inverted (True and False swapped): True where attention is blocked, False where it is "
            "allowed. In this course, as in F.scaled_dot_product_attention, True means 'may attend'.",
            lambda ids: ~document_mask(ids),
        ),
        Variant(
            "off by one: inside each document a query may also see the next key, j = i + 1 (the causal diagonal is "
            "shifted up), so it reads the token it must predict. Query i may attend keys j <= i of its document.",
            lambda ids: _doc(ids, diagonal=1),
        ),
        Variant(
            "off by one: a query may not attend to itself (the causal diagonal is shifted down, j < i), so every "
            "document's first token has no key at all. Query i may attend keys j <= i, itself included.",
            lambda ids: _doc(ids, diagonal=-1),
        ),
        Variant(
            "the causal part is missing: each document is read both ways (a block-diagonal mask), so every token "
            "sees the later tokens of its document (your mask is True above the diagonal inside each document). A "
            "key must be in the query's document and at or before it, j <= i: both conditions at once.",
            lambda ids: _doc(ids, causal=False),
        ),
        Variant(
            "the documents are ignored: your mask is the plain causal mask, so a document sees the end of the one "
            "packed before it (below the diagonal, the entries between two documents are True). A key counts only "
            "when it is in the query's own document as well as at or before it.",
            lambda ids: _doc(ids, documents=False),
        ),
        Variant(
            "the triangle is the wrong one: inside a document query i may attend keys j >= i, the future. The "
            "causal mask is the lower triangle, j <= i with j the column.",
            lambda ids: document_mask(ids).transpose(1, 2),
        ),
        Variant(
            "each token also sees every earlier document: the ids were compared with <= instead of ==. Packed "
            "documents are unrelated texts: a key counts only if it has the query's own id.",
            lambda ids: _doc(ids, relation="<="),
        ),
        Variant(
            "the mask compares the rows of the batch with each other, not each row with itself: the ids broadcast "
            "as (batch, 1, length) against (1, batch, length) give (batch, batch, length), which has the right shape "
            "only when batch == length, as in the first test case, and then broadcasts silently. Each row's ids are "
            "compared with the same row's ids: the new query axis and the new key axis both come after the batch.",
            _doc_rows_of_the_batch,
        ),
        Variant(
            "the rows of padding tokens are all False: you blocked padding as a query as well as a key, so the "
            "softmax of those rows is 0/0 = NaN. Padding is simply one more document (id -1): it sees itself, and no "
            "real token sees it, with no special case.",
            _doc_padding_blocked,
        ),
    ),
    hint=(
        "Two conditions must both hold for query i and key j of one row: the same document, and j not after i. "
        "Build each as a boolean tensor, then AND them.",
        "Same document: compare every token's id with every other token's id in its own row, a (batch, length, "
        "length) grid: ids with a new key axis against ids with a new query axis. Not after: the lower triangle "
        "(length, length), which broadcasts over the batch.",
        "`same = document_ids[:, :, None] == document_ids[:, None, :]`; "
        "`causal = torch.ones(length, length, dtype=torch.bool).tril()`; `return same & causal`.",
    ),
)

# --------------------------------------------------------------------------------------------
# prefix_lm_mask: a mask the lesson did not show
# --------------------------------------------------------------------------------------------


def _swapped_prefix_lm_mask(prefix_lengths, lengths, max_len):
    """prefix_lm_mask with its two length arguments swapped (keys real up to the prefix, prefix up to the length)."""
    i, j = _grid(max_len)
    visible = (j <= i)[None] | (j[None] < lengths[:, None, None])
    return visible & _keys_real(prefix_lengths, max_len)


def _prefix_lm_mask_cases() -> list[Case]:
    def case(prefix: list[int], lengths: list[int], max_len: int, tags, note: str = "") -> Case:
        padded = "no padding" if min(lengths) == max_len else f"lengths {lengths}, max_len {max_len}"
        description = f"prefix lengths {prefix}, {padded}" + (f"; {note}" if note else "")
        return Case(description, (torch.tensor(prefix), torch.tensor(lengths), max_len), tags)

    return [
        case([2, 1, 3], [4, 5, 3], 5, kinds(PADDED), "the third sentence is all prefix"),
        case([0, 2], [3, 6], 6, kinds(PADDED), "a prefix of 0 is a plain causal mask"),
        case([3], [6], 6, kinds(ONE, UNPADDED)),
        case([2], [3], 5, kinds(ONE, PADDED)),
        case([1, 4], [5, 5], 5, kinds(UNPADDED)),
        case([100, 0, 250], [300, 120, 250], 300, kinds(LARGE, PADDED)),
    ]


def _prefix_variant(prefix_shift=0, diagonal=0, on_queries=False, causal=True, prefix=True, pad="keys"):
    def mask(prefix_lengths, lengths, max_len):
        i, j = _grid(max_len)
        visible = (j <= i + diagonal)[None] if causal else torch.ones(1, max_len, max_len, dtype=torch.bool)
        if prefix:
            seen = (i if on_queries else j)[None] < prefix_lengths[:, None, None] + prefix_shift
            visible = visible | seen
        real = _keys_real(lengths, max_len)
        if pad == "keys":
            return visible & real
        if pad == "queries too":
            return visible & real & real.transpose(1, 2)
        if pad == "or":
            return visible | real
        return visible.expand(len(lengths), max_len, max_len)

    return mask


PREFIX_LM_MASK = Exercise(
    name="prefix_lm_mask",
    lesson=LESSON,
    params=("prefix_lengths", "lengths", "max_len"),
    returns=(("batch", "max_len", "max_len"),),
    reference=prefix_lm_mask,
    make_cases=_prefix_lm_mask_cases,
    layout=_query_layout,
    properties=_empty_rows,
    forbidden=OWN_CODE,
    variants=(
        Variant(
            "the mask is inverted: True where attention is blocked and False where it is allowed. In this course "
            "True means 'may attend'.",
            lambda p, n, max_len: ~prefix_lm_mask(p, n, max_len),
        ),
        Variant(
            "the prefix was applied to the queries (rows) instead of the keys (columns): the queries of the prefix "
            "see every key, the part still to be written included, so the prefix reads the answer (the rows of the "
            "prefix are True up to the sentence's end). The prefix is a set of *keys*, columns of the mask, that "
            "every query may see; a query inside the prefix sees the prefix only.",
            _prefix_variant(on_queries=True),
        ),
        Variant(
            "off by one: the prefix is one key too long (key j = prefix_length is visible to the queries before "
            "it). The prefix is keys 0 .. prefix_length - 1, prefix_length keys in all.",
            _prefix_variant(prefix_shift=1),
        ),
        Variant(
            "off by one: the prefix is one key too short (its last key, j = prefix_length - 1, is hidden from the "
            "queries before it). The prefix is keys 0 .. prefix_length - 1, prefix_length keys in all.",
            _prefix_variant(prefix_shift=-1),
        ),
        Variant(
            "off by one: outside the prefix each query may also see the next key, j = i + 1 (the causal diagonal "
            "is shifted up). The causal part is j <= i.",
            _prefix_variant(diagonal=1),
        ),
        Variant(
            "off by one: outside the prefix a query may not see its own position (the causal diagonal is shifted "
            "down, j < i). The causal part is j <= i, itself included.",
            _prefix_variant(diagonal=-1),
        ),
        Variant(
            "the prefix is ignored: your mask is the causal mask with padding, so inside the prefix a query does not "
            "see the prefix's later keys (your mask is False above the diagonal there). Every query may see every "
            "key of the prefix, whatever its position.",
            _prefix_variant(prefix=False),
        ),
        Variant(
            "the causal part is missing: every query sees every real key, the whole sentence read both ways (a BERT "
            "mask). Only the prefix is read both ways; after it, j <= i.",
            _prefix_variant(causal=False, prefix=False),
        ),
        Variant(
            "the padding is not masked: queries may attend padded keys (the columns past each sentence's length are "
            "True in some rows). A padded key may never be attended, whatever the query.",
            _prefix_variant(pad="none"),
        ),
        Variant(
            "the rows of padding queries are all False: you masked the padded queries (rows) too. A row with no "
            "allowed key gives NaN in the softmax; padding is masked as keys (columns) only, and a padding query's "
            "row keeps the real keys.",
            _prefix_variant(pad="queries too"),
        ),
        Variant(
            "the padding mask is combined with OR instead of AND: every query then sees every real key. A key "
            "must be real AND (before the query OR in the prefix).",
            _prefix_variant(pad="or"),
        ),
        Variant(
            "prefix_lengths and lengths are swapped: the keys were cut at the prefix length and the prefix runs to "
            "the end of the sentence. `lengths` says which keys are real, `prefix_lengths` which are read both ways.",
            lambda p, n, max_len: _swapped_prefix_lm_mask(p, n, max_len),
        ),
        Variant(
            "the query and key axes are swapped: your mask is the reference transposed. Rows are queries and columns "
            "keys: entry (b, i, j) says whether query i of sentence b may attend key j.",
            lambda p, n, max_len: prefix_lm_mask(p, n, max_len).transpose(1, 2),
        ),
    ),
    hint=(
        "Write the rule for one key as three conditions: is it a real token, is it at or before the query, is it in "
        "the prefix. Which two are combined with OR, and which one must always hold?",
        "Key j is visible to query i of sentence b when j < lengths[b] AND (j <= i OR j < prefix_lengths[b]). With "
        "positions i as a column and j as a row, `j <= i` is (length, length); `j < prefix_lengths[:, None, None]` "
        "and the real keys are per sentence: give them a query axis of size 1.",
        "`i = torch.arange(max_len)[:, None]; j = torch.arange(max_len)[None, :]`; "
        "`visible = (j <= i)[None] | (j[None] < prefix_lengths[:, None, None])`; "
        "`return visible & (j < lengths[:, None])[:, None, :]`.",
    ),
)

# --------------------------------------------------------------------------------------------
# local_global_mask: a window, plus each sentence's own global tokens (a case the lesson did not show)
# --------------------------------------------------------------------------------------------


def _flags(length: int, *positions: int) -> list[bool]:
    return [t in positions for t in range(length)]


def _local_global_cases() -> list[Case]:
    def case(rows: list[list[bool]], window: int, tags, note: str) -> Case:
        return Case(f"{note}; window {window}", (torch.tensor(rows), window), tags)

    large = [_flags(280, 0, 1, 2, 140, 279)]  # distances past 255: an int8 position wraps around
    return [
        case([_flags(5, 0), _flags(5, 2), _flags(5), _flags(5, 1, 4), _flags(5, 3)], 1, kinds(),
             "5 sentences of 5 tokens (as many sentences as tokens), each its own global tokens, one with none"),
        case([_flags(7, 0)], 1, kinds(ONE), "one sentence of 7 tokens, token 0 global"),
        case([_flags(8, 0, 5)], 2, kinds(ONE), "one sentence of 8 tokens, tokens 0 and 5 global"),
        case([_flags(6, 0), _flags(6, 3, 4), _flags(6)], 0, kinds(), "3 sentences of 6 tokens; no neighbours at all"),
        case([_flags(9, 8), _flags(9, 0, 1)], 3, kinds(), "2 sentences of 9 tokens: the last global; the first two"),
        case(large, 16, kinds(LARGE, ONE), "one sentence of 280 tokens, 5 of them global"),
    ]  # fmt: skip


def _lg(is_global, window, rows=True, columns=True, local="window", combine="or", merged=False):
    """A variant of the rule: |i - j| <= window (or another local part) OR (global query) OR (global key)."""
    length = is_global.shape[1]
    i, j = _grid(length)
    parts = {"window": (i - j).abs() <= window, "narrow": (i - j).abs() < window,
             "wide": (i - j).abs() <= window + 1, "past": (i - j >= 0) & (i - j <= window),
             "none": torch.zeros(length, length, dtype=torch.bool)}  # fmt: skip
    near = parts[local][None]
    flags = is_global.any(dim=0, keepdim=True).expand_as(is_global) if merged else is_global
    far = torch.zeros(is_global.shape[0], length, length, dtype=torch.bool)
    if rows:
        far = far | flags[:, :, None]
    if columns:
        far = far | flags[:, None, :]
    return near | far if combine == "or" else near & far


def _lg_rows_of_the_batch(is_global, window):
    """is_global broadcast as (batch, 1, length) | (1, batch, length): sentences combined with each other."""
    local = sliding_window_mask(is_global.shape[1], window)
    return local | is_global[:, None] | is_global[None, :]


LOCAL_GLOBAL_MASK = Exercise(
    name="local_global_mask",
    lesson=LESSON,
    params=("is_global", "window"),
    returns=(("batch", "length", "length"),),
    reference=local_global_mask,
    make_cases=_local_global_cases,
    properties=lambda args, got: _empty_rows(args, got),
    forbidden=OWN_CODE,
    variants=(
        Variant(
            "the mask is inverted (True and False swapped): True where attention is blocked. In this course True "
            "means 'may attend'.",
            lambda g, w: ~local_global_mask(g, w),
        ),
        Variant(
            "off by one: the window is one neighbour too narrow on each side (|i - j| < window). Query i may attend "
            "keys with |i - j| <= window: window neighbours on each side, and itself.",
            lambda g, w: _lg(g, w, local="narrow"),
        ),
        Variant(
            "off by one: the window is one neighbour too wide on each side (|i - j| <= window + 1). Query i may "
            "attend keys with |i - j| <= window.",
            lambda g, w: _lg(g, w, local="wide"),
        ),
        Variant(
            "the global tokens only attend: they see every key (their rows are True), but a token that is not "
            "global sees them only inside its window (their columns were left out). Global means both ways: a "
            "global token sees every token, and every token sees it.",
            lambda g, w: _lg(g, w, columns=False),
        ),
        Variant(
            "the global tokens are only attended to: every query sees them (their columns are True), but they see "
            "only their window and the other global tokens (their rows were left out). Global means both ways: a "
            "global token sees every token, and every token sees it.",
            lambda g, w: _lg(g, w, rows=False),
        ),
        Variant(
            "the global tokens are ignored: your mask is the sliding window alone, so the rows and columns of the "
            "global tokens are False beyond the window. A global token sees every token, and every token sees it.",
            lambda g, w: _lg(g, w, rows=False, columns=False),
        ),
        Variant(
            "the window is missing: only global tokens are seen, and a token that is not global does not even see "
            "itself (an empty row when its sentence has no global token). Every token also sees its neighbours, "
            "|i - j| <= window, itself included.",
            lambda g, w: _lg(g, w, local="none"),
        ),
        Variant(
            "the window and the global part are combined with AND: a key must then be a near neighbour and global "
            "at once. A key is allowed if it is near OR the query is global OR the key is global.",
            lambda g, w: _lg(g, w, combine="and"),
        ),
        Variant(
            "the window covers only the past (0 <= i - j <= window), as a causal window would. This mask looks both "
            "ways: |i - j| <= window.",
            lambda g, w: _lg(g, w, local="past"),
        ),
        Variant(
            "the global tokens of all sentences were merged (the flags reduced over the batch axis): a token global "
            "in one sentence became global in every sentence. Each sentence has its own global tokens.",
            lambda g, w: _lg(g, w, merged=True),
        ),
        Variant(
            "the global flags were broadcast over the wrong axis: as (batch, 1, length) against (1, batch, length) "
            "they combine the sentences with each other, (batch, batch, length), which has the right shape only "
            "when batch == length (the first test case) and then broadcasts silently. Each sentence's flags mark "
            "its own rows (a global query) and its own columns (a global key): the new axes come after the batch.",
            _lg_rows_of_the_batch,
        ),
    ),
    hint=(
        "Three reasons can each allow query i to see key j: they are near each other, i is global, or j is global. "
        "Build each as a boolean tensor that broadcasts to (batch, length, length), then OR them.",
        "Near: |i - j| <= window, from the positions as a column and as a row, (length, length). Global query: the "
        "flags with a new key axis, (batch, length, 1). Global key: the flags with a new query axis, (batch, 1, "
        "length).",
        "`i = torch.arange(length)[:, None]; j = torch.arange(length)[None, :]`; "
        "`return ((i - j).abs() <= window)[None] | is_global[:, :, None] | is_global[:, None, :]`.",
    ),
)

# --------------------------------------------------------------------------------------------
# moved_by: predict the intervention test on packed documents (a transfer of the lesson's test)
# --------------------------------------------------------------------------------------------


def _moved_by(document_ids, position):
    """The reference: the outputs of one attention layer with the document mask that move when token ``position``
    changes."""
    return moved_by(document_mask(document_ids), position)


def _moved_by_cases() -> list[Case]:
    def case(rows: list[list[int]], position: int, tags, note: str) -> Case:
        return Case(f"{note}; the token at position {position} changes", (torch.tensor(rows), position), tags)

    large = [
        _ids(*((d, n) for d, n in enumerate((30, 1, 50, 3, 76)))),
        _ids(*((d, n) for d, n in enumerate((90, 40, 8))), (-1, 22)),
    ]
    return [
        case([_ids((0, 2), (1, 2)), _ids((0, 4)), _ids((0, 1), (1, 1), (2, 2)), _ids((0, 3), (-1, 1))], 1,
             kinds(PADDED), "4 rows of 4 tokens (as many rows as tokens); the last row ends in padding (id -1)"),
        case([_ids((0, 3), (1, 2), (2, 3))], 3, kinds(ONE, UNPADDED), "one row of 3 documents of lengths 3, 2, 3"),
        case([_ids((0, 2), (1, 3), (-1, 2))], 5, kinds(ONE, PADDED),
             "one row: documents of 2 and 3 tokens, then 2 of padding"),
        case([_ids((7, 3), (3, 2)), _ids((2, 1), (9, 4))], 2, kinds(UNPADDED),
             "2 rows of 5 whose ids are any numbers (7, 3; 2, 9)"),
        case([_ids((0, 6), (-1, 1)), _ids((0, 2), (1, 3), (-1, 2)), _ids((0, 7))], 0, kinds(PADDED),
             "3 rows of 7, two ending in padding"),
        case([_ids((0, 4), (1, 2)), _ids((0, 1), (1, 5))], 2, kinds(UNPADDED), "2 rows of 6"),
        case(large, 140, kinds(LARGE, PADDED), "2 rows of 160 tokens: 5 documents; 3 documents and 22 of padding"),
    ]  # fmt: skip


def _moved(ids, position, same=True, when="at or after"):
    """A variant: tokens of the changed token's document (or all, ``same=False``) at the positions ``when`` says."""
    t = torch.arange(ids.shape[1])[None, :]
    where = {"at or after": t >= position, "after": t > position, "from one before": t >= position - 1,
             "at or before": t <= position, "anywhere": torch.ones_like(t, dtype=torch.bool),
             "itself": t == position}[when]  # fmt: skip
    document = ids == ids[:, position : position + 1] if same else torch.ones_like(ids, dtype=torch.bool)
    return document & where


def _moved_other_rows(ids, position):
    """The changed token's id taken per position across the batch (ids[:, position] without its axis): rows of
    the batch compared with each other, which has the right shape only when batch == length."""
    return (ids == ids[:, position]) & (torch.arange(ids.shape[1])[None, :] >= position)


MOVED_BY = Exercise(
    name="moved_by",
    lesson=LESSON,
    params=("document_ids", "position"),
    returns=(("batch", "length"),),
    reference=_moved_by,
    make_cases=_moved_by_cases,
    layout=lambda args: (Layout(positions=1, real=args[0] >= 0, words=("real tokens", "padding tokens")),),
    forbidden=OWN_CODE,
    variants=(
        Variant(
            "the direction is reversed: your answer is the earlier tokens of the document, the keys the changed token "
            "reads (the row of the mask at that position), not the queries that read it (its column). An output "
            "moves when its query may attend the changed key: later tokens of the same document, and the token itself.",
            lambda ids, p: document_mask(ids)[:, p, :],
            lambda ids, p: _moved(ids, p, when="at or before"),
        ),
        Variant(
            "the documents are ignored: every output at or after the position moves in your answer, as under a plain "
            "causal mask. Packed documents do not see each other, so a change reaches only its own document.",
            lambda ids, p: _moved(ids, p, same=False),
        ),
        Variant(
            "the causal part is ignored: the whole document moves in your answer, earlier tokens included. Those "
            "cannot see the changed token, so their outputs stay exactly the same.",
            lambda ids, p: _moved(ids, p, when="anywhere"),
        ),
        Variant(
            "off by one: the changed token itself is left out. Its own output moves too, through its query (and its "
            "key and value, which it attends to).",
            lambda ids, p: _moved(ids, p, when="after"),
        ),
        Variant(
            "off by one: the token just before the changed one moves in your answer. It cannot attend to a later "
            "key, so its output stays exactly the same.",
            lambda ids, p: _moved(ids, p, when="from one before"),
        ),
        Variant(
            "only the changed token itself moves in your answer. The later tokens of its document attend to it, so "
            "their outputs move too.",
            lambda ids, p: _moved(ids, p, when="itself"),
        ),
        Variant(
            "the ids of the changed position were compared across the rows of the batch: a (batch, length) tensor "
            "against a (batch,) one broadcasts the batch axis against the positions, which has the right shape only "
            "when batch == length (the first test case). Each row's changed token has its own id.",
            _moved_other_rows,
        ),
    ),
    hint=(
        "Run the intervention test in your head: which queries may attend the key that changed? Those outputs move, "
        "and so does the changed token's own output.",
        "Query i may attend key j when they share a document and j <= i. So with j the changed position, the moved "
        "outputs are the positions i >= j whose id equals the id at j, in each row.",
        "`same = document_ids == document_ids[:, position : position + 1]`; "
        "`return same & (torch.arange(document_ids.shape[1])[None, :] >= position)`.",
    ),
)

EXERCISES = (TO_ADDITIVE, DOCUMENT_MASK, MOVED_BY, PREFIX_LM_MASK, LOCAL_GLOBAL_MASK)
