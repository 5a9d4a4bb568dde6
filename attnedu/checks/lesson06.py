"""Checks for the exercises of lesson 06 (masking).

Masks are booleans, True = may attend, rows are queries and columns keys, as everywhere in the course.
Every exercise has test cases with a batch of one, with and without padding, and a large one (sequences of
hundreds of positions); the known-wrong variants include an off-by-one in both directions (the causal
diagonal shifted up and down, the end of the prefix one key too far and one too short). Batch sizes differ
from the sequence lengths so that a transpose shows, lengths include 1 and the full padded length, and the
padded length is sometimes longer than every sentence.
"""

from __future__ import annotations

import torch

from ..masks import causal_mask, causal_padding_mask, padding_mask, prefix_lm_mask, to_additive
from .exercise import EMPTY_ROW, LARGE, ONE, PADDED, UNPADDED, Case, Exercise, Layout, Variant, kinds

LESSON = "06_masking"


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
# causal_padding_mask
# --------------------------------------------------------------------------------------------


def _causal_padding_mask_cases() -> list[Case]:
    def case(lengths: list[int], max_len: int, tags, description: str) -> Case:
        return Case(description, (torch.tensor(lengths), max_len), tags)

    return [
        case([3, 5, 2], 5, kinds(PADDED), "3 sentences of lengths [3, 5, 2], max_len 5"),
        case([2, 4], 6, kinds(PADDED), "lengths [2, 4] padded to max_len 6, longer than any sentence"),
        case([4], 4, kinds(ONE, UNPADDED), "one sentence of length 4, no padding"),
        case([2], 5, kinds(ONE, PADDED), "one sentence of length 2 padded to max_len 5"),
        case([3, 3], 3, kinds(UNPADDED), "2 sentences of length 3, no padding"),
        case([1, 4, 6, 2], 6, kinds(PADDED), "4 sentences of lengths [1, 4, 6, 2], max_len 6: one of a single word"),
        case(
            [300, 177, 1],
            300,
            kinds(LARGE, PADDED),
            "long sentences: lengths [300, 177, 1], max_len 300",
        ),
    ]


def _cpm(lengths, max_len, diagonal=0, pad_shift=0, queries_too=False):
    """causal (j <= i + diagonal) AND key j real (j < length + pad_shift) [AND query i real]."""
    i, j = _grid(max_len)
    mask = (j <= i + diagonal)[None] & _keys_real(lengths, max_len, pad_shift)
    if queries_too:
        mask = mask & _keys_real(lengths, max_len).transpose(1, 2)
    return mask


CAUSAL_PADDING_MASK = Exercise(
    name="causal_padding_mask",
    lesson=LESSON,
    params=("lengths", "max_len"),
    returns=(("batch", "max_len", "max_len"),),
    reference=causal_padding_mask,
    make_cases=_causal_padding_mask_cases,
    layout=_query_layout,
    properties=_empty_rows,
    variants=(
        Variant(
            "the mask is inverted: it is True where attention is blocked (the future and the padding) and False "
            "where it is allowed. In this course True means 'may attend', as in F.scaled_dot_product_attention.",
            lambda lengths, max_len: ~causal_padding_mask(lengths, max_len),
        ),
        Variant(
            "off by one: each query may also see the next key, j = i + 1 (the causal diagonal is shifted up), so in "
            "training it can read the very word it must predict. Query i may attend keys j <= i: "
            "`torch.ones(max_len, max_len, dtype=torch.bool).tril()`.",
            lambda lengths, max_len: _cpm(lengths, max_len, diagonal=1),
        ),
        Variant(
            "off by one: a query may not attend to its own position (the causal diagonal is shifted down, j < i), "
            "so query 0 has no key at all. Query i may attend keys j <= i, itself included: `.tril()`, not "
            "`.tril(-1)`.",
            lambda lengths, max_len: _cpm(lengths, max_len, diagonal=-1),
        ),
        Variant(
            "the triangle is the wrong one: query i may attend keys j >= i, the future, and not the past. The "
            "causal mask is the lower triangle, `.tril()` (or `j <= i` with j the column).",
            lambda lengths, max_len: (_grid(max_len)[1] >= _grid(max_len)[0])[None] & _keys_real(lengths, max_len),
        ),
        Variant(
            "the padding is not masked: your mask is the causal mask for every sentence, so queries attend to padded "
            "keys. AND it with the padding mask of the keys, one row per sentence: `padding[:, None, :]`, "
            "(batch, 1, max_len).",
            lambda lengths, max_len: causal_mask(max_len)[None].expand(len(lengths), max_len, max_len),
        ),
        Variant(
            "the causal part is missing: your mask is the padding mask of the keys in every row, so every query sees "
            "the words after it. AND it with the lower triangle.",
            lambda lengths, max_len: _keys_real(lengths, max_len).expand(len(lengths), max_len, max_len),
        ),
        Variant(
            "the two masks are combined with OR (`|`): a query may then attend every real key, the future included, "
            "and every earlier key, padding included. A key is allowed only if it passes both: AND (`&`).",
            lambda lengths, max_len: causal_mask(max_len)[None] | _keys_real(lengths, max_len),
        ),
        Variant(
            "the rows of padding queries are all False: you masked the padded queries (rows), as well as or instead of "
            "the padded keys. A "
            "row with no allowed key gives NaN in the softmax (0/0). Mask only the keys, "
            "`causal & padding[:, None, :]`: a padded query then still sees the real keys before it, and its output "
            "is ignored later by the loss.",
            lambda lengths, max_len: _cpm(lengths, max_len, queries_too=True),
        ),
        Variant(
            "the query and key axes are swapped: your mask is the reference transposed, (batch, key, query). Rows "
            "are queries and columns keys: `mask[b, i, j]` says whether query i may attend key j.",
            lambda lengths, max_len: causal_padding_mask(lengths, max_len).transpose(1, 2),
        ),
        Variant(
            "off by one in the padding: each sentence has one key too many (key j = length, the first padding "
            "position, is allowed). Key j is real when `j < length`.",
            lambda lengths, max_len: _cpm(lengths, max_len, pad_shift=1),
        ),
        Variant(
            "off by one in the padding: each sentence's last real word (key j = length - 1) is blocked. Key j is "
            "real when `j < length`.",
            lambda lengths, max_len: _cpm(lengths, max_len, pad_shift=-1),
        ),
        Variant(
            "the mask is only as long as the longest sentence, not max_len: a padded batch can be longer than its "
            "longest sentence. Build both axes from max_len.",
            lambda lengths, max_len: causal_padding_mask(lengths, int(lengths.max())),
        ),
    ),
    hint="Build two masks and AND them: the causal one, `torch.ones(max_len, max_len, dtype=torch.bool).tril()` "
    "(max_len, max_len), and the padding mask of lesson 01, `torch.arange(max_len)[None, :] < lengths[:, None]` "
    "(batch, max_len). The padding is about keys, the columns: give it a query axis, `padding[:, None, :]`, and "
    "broadcasting does the rest.",
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
    "blocked entries hold {what} instead of -inf. Added to the scores, a finite number leaves a blocked key a tiny "
    "weight, and a row with nothing allowed gets uniform weights, attention to padding, where -inf gives NaN that "
    "the course's masked softmax turns into zeros. Use `float('-inf')`."
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
            "blocks it. True = may attend, so True becomes 0 and False becomes -inf: `masked_fill(~mask, ...)`.",
            lambda mask, dtype: _filled(mask, dtype, blocked=0.0, allowed=float("-inf")),
        ),
        Variant(_FINITE.format(what="-1e9"), lambda mask, dtype: _filled(mask, dtype, -1e9)),
        Variant(_FINITE.format(what="-10000"), lambda mask, dtype: _filled(mask, dtype, -1e4)),
        Variant(
            _FINITE.format(what="the most negative number of the dtype (`torch.finfo(dtype).min`)"),
            lambda mask, dtype: _filled(mask, dtype, torch.finfo(dtype).min),
        ),
        Variant(
            "your output is the mask as 0/1 numbers (`mask.to(dtype)`): 1 where allowed, 0 where blocked. Added to "
            "the scores that blocks nothing. An additive mask is 0 where allowed and -inf where blocked.",
            lambda mask, dtype: mask.to(dtype),
        ),
        Variant(
            "blocked entries hold -1 and allowed ones 0 (`mask.to(dtype) - 1`): added to the scores, -1 hardly "
            "changes a weight. Blocked entries must be -inf.",
            lambda mask, dtype: mask.to(dtype) - 1,
        ),
        Variant(
            "blocked entries hold +inf instead of -inf: added to a score, +inf makes that key take all the weight "
            "(or NaN, inf - inf, in the softmax). Use `float('-inf')`.",
            lambda mask, dtype: _filled(mask, dtype, float("inf")),
        ),
        Variant(
            "your output is NaN where attention is allowed: it multiplies by -inf, and 0 * -inf is NaN, not 0. Choose "
            "values instead of multiplying: `torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, float('-inf'))` "
            "or `torch.where(mask, 0.0, float('-inf'))`.",
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
            "your output is always float32, whatever `dtype` asked for. The additive mask is added to the scores, so "
            "it must have their dtype: create it with `dtype=dtype` (or convert with `.to(dtype)`).",
            lambda mask, dtype: to_additive(mask),
        ),
    ),
    hint="Start from zeros of the mask's shape in the requested dtype, `torch.zeros(mask.shape, dtype=dtype)`, then "
    "fill the blocked entries, where the mask is False: `.masked_fill(~mask, float('-inf'))`.",
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
    variants=(
        Variant(
            "the mask is inverted: True where attention is blocked and False where it is allowed. In this course "
            "True means 'may attend'.",
            lambda p, n, max_len: ~prefix_lm_mask(p, n, max_len),
        ),
        Variant(
            "the prefix was applied to the queries (rows) instead of the keys (columns): the queries of the prefix "
            "see every key, the part still to be written included, so the prefix reads the answer. The prefix is a "
            "set of *keys* that every query may see: `j < prefix_length`, with j the column.",
            _prefix_variant(on_queries=True),
        ),
        Variant(
            "off by one: the prefix is one key too long (key j = prefix_length is visible to the queries before "
            "it). The prefix is keys 0 .. prefix_length - 1: `j < prefix_length`.",
            _prefix_variant(prefix_shift=1),
        ),
        Variant(
            "off by one: the prefix is one key too short (its last key, j = prefix_length - 1, is hidden from the "
            "queries before it). The prefix is keys 0 .. prefix_length - 1: `j < prefix_length`.",
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
            "the prefix is ignored: your mask is the causal-plus-padding mask of exercise 1. Let every query also "
            "see the keys of the prefix: OR the causal part with `j < prefix_length`.",
            _prefix_variant(prefix=False),
        ),
        Variant(
            "the causal part is missing: every query sees every real key, the whole sentence read both ways (a BERT "
            "mask). Only the prefix is read both ways; after it, j <= i.",
            _prefix_variant(causal=False, prefix=False),
        ),
        Variant(
            "the padding is not masked: queries may attend padded keys. AND the result with the padding mask of the "
            "keys, `padding[:, None, :]`.",
            _prefix_variant(pad="none"),
        ),
        Variant(
            "the rows of padding queries are all False: you masked the padded queries (rows) too. A row with no "
            "allowed key gives NaN in the softmax; mask only the keys, as in exercise 1.",
            _prefix_variant(pad="queries too"),
        ),
        Variant(
            "the padding mask is combined with OR (`|`) instead of AND: every query then sees every real key. A key "
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
            "keys: `mask[b, i, j]` says whether query i may attend key j.",
            lambda p, n, max_len: prefix_lm_mask(p, n, max_len).transpose(1, 2),
        ),
    ),
    hint="Start from your causal-plus-padding mask's two parts, then widen the causal one: key j is visible to "
    "query i if `j <= i` OR `j < prefix_lengths[b]`, which broadcasts as `(j <= i)[None] | (j[None] < "
    "prefix_lengths[:, None, None])` with `i = torch.arange(max_len)[:, None]` and `j = torch.arange(max_len)[None, "
    ":]`. Then AND with the padding mask of the keys.",
)

EXERCISES = (CAUSAL_PADDING_MASK, TO_ADDITIVE, PREFIX_LM_MASK)
