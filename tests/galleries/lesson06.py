"""Lesson 06, 06_masking: the galleries of ``to_additive``, ``document_mask``, ``moved_by``, ``prefix_lm_mask`` and
``local_global_mask`` (CORRECT, MUTANTS, OFF_BY_ONE, KIND_MUTANTS, KINDS_NOT_APPLICABLE, BUGS, as
tests/galleries/__init__.py describes them), and REFERENCE_USE: functions that are, or call, the package's own
masks, which the exercises forbid (each must fail, whatever it returns).

``to_additive`` converts booleans, which have no value that could overflow: no mistake shows on large inputs
only (KINDS_NOT_APPLICABLE), though the exercise still has large test cases. ``local_global_mask`` has no
padding (a global flag per token, no lengths), so neither padded nor unpadded cases.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnedu import masks
from attnedu.checks.exercise import LARGE, PADDED, UNPADDED
from attnedu.masks import to_additive

from .common import GENERIC, NEG_INF, batch_of_one

# --------------------------------------------------------------------------------------------
# Correct versions, written as a learner would
# --------------------------------------------------------------------------------------------


def learner_causal_padding_mask(lengths, max_len):  # a helper of the prefix-LM mutants (lesson 06's cell)
    causal = torch.ones(max_len, max_len, dtype=torch.bool).tril()
    padding = torch.arange(max_len)[None, :] < lengths[:, None]
    return causal[None, :, :] & padding[:, None, :]


def learner_to_additive(mask, dtype):
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, NEG_INF)


def learner_to_additive_where(mask, dtype):
    return torch.where(mask, 0.0, NEG_INF).to(dtype)


def learner_to_additive_log(mask, dtype):
    return mask.to(dtype).log()  # log 1 = 0, log 0 = -inf


def learner_prefix_lm_mask(prefix_lengths, lengths, max_len):
    i = torch.arange(max_len)[:, None]
    j = torch.arange(max_len)[None, :]
    visible = (j <= i)[None] | (j[None] < prefix_lengths[:, None, None])
    real = torch.arange(max_len)[None, :] < lengths[:, None]
    return visible & real[:, None, :]


def learner_prefix_lm_mask_blocks(prefix_lengths, lengths, max_len):
    """The prefix as a block: queries and keys both in the prefix see each other; the rest is causal."""
    positions = torch.arange(max_len)
    in_prefix = positions[None, :] < prefix_lengths[:, None]  # (batch, max_len)
    block = in_prefix[:, :, None] & in_prefix[:, None, :]
    causal = torch.tril(torch.ones(max_len, max_len, dtype=torch.bool))
    real = positions[None, :] < lengths[:, None]
    return (block | causal) & real[:, None, :]


def learner_document_mask(document_ids):
    length = document_ids.shape[1]
    same = document_ids[:, :, None] == document_ids[:, None, :]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    return same & causal


def learner_document_mask_loop(document_ids):
    batch, length = document_ids.shape
    mask = torch.zeros(batch, length, length, dtype=torch.bool)
    for b in range(batch):
        for i in range(length):
            for j in range(i + 1):
                mask[b, i, j] = bool(document_ids[b, i] == document_ids[b, j])
    return mask


def learner_document_mask_one_hot(document_ids):
    """Relabel the ids 0..k per row (torch.unique), then same document = one-hot rows that overlap."""
    labels = torch.stack([torch.unique(row, return_inverse=True)[1] for row in document_ids])
    one_hot = F.one_hot(labels).float()  # (batch, length, documents)
    same = (one_hot @ one_hot.transpose(1, 2)) > 0
    return same & torch.tril(torch.ones(labels.shape[1], labels.shape[1])).bool()


def learner_local_global_mask(is_global, window):
    length = is_global.shape[1]
    i = torch.arange(length)[:, None]
    j = torch.arange(length)[None, :]
    near = (i - j).abs() <= window
    return near[None] | is_global[:, :, None] | is_global[:, None, :]


def learner_local_global_mask_loop(is_global, window):
    flags = is_global.tolist()
    rows = [[[abs(i - j) <= window or g[i] or g[j] for j in range(len(g))] for i in range(len(g))] for g in flags]
    return torch.tensor(rows, dtype=torch.bool)


def learner_local_global_mask_band(is_global, window):
    length = is_global.shape[1]
    band = torch.ones(length, length, dtype=torch.bool).triu(-window).tril(window)
    both_ways = is_global.unsqueeze(2) | is_global.unsqueeze(1)
    return band | both_ways


def learner_moved_by(document_ids, position):
    """The intervention test predicted: the column of my document mask at that key, and the token itself."""
    mask = learner_document_mask(document_ids)
    itself = torch.arange(document_ids.shape[1]) == position
    return mask[:, :, position] | itself[None, :]


def learner_moved_by_loop(document_ids, position):
    batch, length = document_ids.shape
    moved = torch.zeros(batch, length, dtype=torch.bool)
    for b in range(batch):
        for i in range(position, length):
            if document_ids[b, i] == document_ids[b, position]:
                moved[b, i] = True
    return moved


CORRECT = {
    "to_additive": [learner_to_additive, learner_to_additive_where, learner_to_additive_log],
    "document_mask": [learner_document_mask, learner_document_mask_loop, learner_document_mask_one_hot],
    "moved_by": [learner_moved_by, learner_moved_by_loop],
    "prefix_lm_mask": [learner_prefix_lm_mask, learner_prefix_lm_mask_blocks],
    "local_global_mask": [learner_local_global_mask, learner_local_global_mask_loop, learner_local_global_mask_band],
}


# Functions that are, or call, the package's own masks: the exercises ask for the learner's own code, so each fails
# (with a message naming the package function), even when its values are right.
def _uses_causal_mask(document_ids):
    same = document_ids[:, :, None] == document_ids[:, None, :]
    return same & masks.causal_mask(document_ids.shape[1])


def _calls_prefix_lm_mask(prefix_lengths, lengths, max_len):
    return masks.prefix_lm_mask(prefix_lengths, lengths, max_len).clone()


REFERENCE_USE = [
    ("moved_by", lambda ids, position: masks.moved_by(masks.document_mask(ids), position)),
    ("to_additive", to_additive),
    ("to_additive", lambda mask, dtype: to_additive(mask, dtype)),
    ("document_mask", masks.document_mask),
    ("document_mask", _uses_causal_mask),
    ("prefix_lm_mask", _calls_prefix_lm_mask),
    ("local_global_mask", lambda is_global, window: masks.local_global_mask(is_global, window)),
]


# --------------------------------------------------------------------------------------------
# The mutant gallery: (exercise, mutant, a substring of the expected diagnosis)
# --------------------------------------------------------------------------------------------


def _padding(lengths, max_len):
    return torch.arange(max_len)[None, :] < lengths[:, None]


def ta_inverted(mask, dtype):
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(mask, NEG_INF)


def ta_minus_1e9(mask, dtype):
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, -1e9)


def ta_bert(mask, dtype):
    return (1.0 - mask.to(dtype)) * -10000.0


def ta_finfo_min(mask, dtype):
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, torch.finfo(dtype).min)


def ta_as_floats(mask, dtype):
    return mask.to(dtype)


def ta_minus_one(mask, dtype):
    return mask.to(dtype) - 1


def ta_plus_inf(mask, dtype):
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, float("inf"))


def ta_times_inf(mask, dtype):
    return (1 - mask.to(dtype)) * NEG_INF


def ta_float32(mask, dtype):
    return torch.zeros(mask.shape).masked_fill(~mask, NEG_INF)


def ta_in_place(mask, dtype):
    mask.logical_not_()
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(mask, NEG_INF)


def ta_bool(mask, dtype):
    return ~mask


# prefix_lm_mask
def _prefix(prefix_lengths, lengths, max_len, shift=0, diagonal=0):
    i = torch.arange(max_len)[:, None]
    j = torch.arange(max_len)[None, :]
    visible = (j <= i + diagonal)[None] | (j[None] < prefix_lengths[:, None, None] + shift)
    return visible & _padding(lengths, max_len)[:, None, :]


def plm_inverted(prefix_lengths, lengths, max_len):
    return ~learner_prefix_lm_mask(prefix_lengths, lengths, max_len)


def plm_prefix_on_queries(prefix_lengths, lengths, max_len):
    i = torch.arange(max_len)[:, None]
    j = torch.arange(max_len)[None, :]
    visible = (j <= i)[None] | (i[None] < prefix_lengths[:, None, None])
    return visible & _padding(lengths, max_len)[:, None, :]


def plm_prefix_one_long(prefix_lengths, lengths, max_len):
    return _prefix(prefix_lengths, lengths, max_len, shift=1)


def plm_prefix_one_short(prefix_lengths, lengths, max_len):
    return _prefix(prefix_lengths, lengths, max_len, shift=-1)


def plm_sees_next(prefix_lengths, lengths, max_len):
    return _prefix(prefix_lengths, lengths, max_len, diagonal=1)


def plm_not_itself(prefix_lengths, lengths, max_len):
    return _prefix(prefix_lengths, lengths, max_len, diagonal=-1)


def plm_no_prefix(prefix_lengths, lengths, max_len):
    return learner_causal_padding_mask(lengths, max_len)


def plm_bidirectional(prefix_lengths, lengths, max_len):
    return _padding(lengths, max_len)[:, None, :].expand(-1, max_len, -1)


def plm_no_padding(prefix_lengths, lengths, max_len):
    return _prefix(prefix_lengths, torch.full_like(lengths, max_len), max_len)


def plm_pads_queries_too(prefix_lengths, lengths, max_len):
    return learner_prefix_lm_mask(prefix_lengths, lengths, max_len) & _padding(lengths, max_len)[:, :, None]


def plm_lengths_swapped(prefix_lengths, lengths, max_len):
    return learner_prefix_lm_mask(lengths, prefix_lengths, max_len)


def plm_transposed(prefix_lengths, lengths, max_len):
    return learner_prefix_lm_mask(prefix_lengths, lengths, max_len).mT


def plm_as_float(prefix_lengths, lengths, max_len):
    return learner_prefix_lm_mask(prefix_lengths, lengths, max_len).float()


# document_mask
def _tril(length, diagonal=0):
    return torch.ones(length, length, dtype=torch.bool).tril(diagonal)


def _same(ids):
    return ids[:, :, None] == ids[:, None, :]


def doc_inverted(document_ids):
    return ~learner_document_mask(document_ids)


def doc_sees_next(document_ids):
    return _same(document_ids) & _tril(document_ids.shape[1], 1)


def doc_not_itself(document_ids):
    return _same(document_ids) & _tril(document_ids.shape[1], -1)


def doc_both_ways(document_ids):
    return _same(document_ids)


def doc_plain_causal(document_ids):
    return _tril(document_ids.shape[1]).expand(document_ids.shape[0], -1, -1).clone()


def doc_upper(document_ids):
    return _same(document_ids) & torch.ones(document_ids.shape[1], document_ids.shape[1], dtype=torch.bool).triu()


def doc_earlier_documents(document_ids):
    return (document_ids[:, None, :] <= document_ids[:, :, None]) & _tril(document_ids.shape[1])


def doc_rows_of_batch(document_ids):
    return (document_ids[:, None] == document_ids[None, :]) & _tril(document_ids.shape[1])


def doc_blocks_padding(document_ids):
    real = document_ids >= 0
    return learner_document_mask(document_ids) & real[:, None, :] & real[:, :, None]


def doc_additive(document_ids):
    return torch.zeros(document_ids.shape[0], document_ids.shape[1], document_ids.shape[1]).masked_fill(
        ~learner_document_mask(document_ids), NEG_INF
    )


# local_global_mask
def _near(length, window):
    i = torch.arange(length)[:, None]
    j = torch.arange(length)[None, :]
    return (i - j).abs() <= window


def lg_inverted(is_global, window):
    return ~learner_local_global_mask(is_global, window)


def lg_too_narrow(is_global, window):
    i, j = torch.arange(is_global.shape[1])[:, None], torch.arange(is_global.shape[1])[None, :]
    return ((i - j).abs() < window)[None] | is_global[:, :, None] | is_global[:, None, :]


def lg_too_wide(is_global, window):
    return _near(is_global.shape[1], window + 1)[None] | is_global[:, :, None] | is_global[:, None, :]


def lg_rows_only(is_global, window):
    return _near(is_global.shape[1], window)[None] | is_global[:, :, None]


def lg_columns_only(is_global, window):
    return _near(is_global.shape[1], window)[None] | is_global[:, None, :]


def lg_window_only(is_global, window):
    return _near(is_global.shape[1], window).expand(is_global.shape[0], -1, -1).clone()


def lg_global_only(is_global, window):
    return is_global[:, :, None] | is_global[:, None, :]


def lg_and(is_global, window):
    return _near(is_global.shape[1], window)[None] & (is_global[:, :, None] | is_global[:, None, :])


def lg_past_only(is_global, window):
    i, j = torch.arange(is_global.shape[1])[:, None], torch.arange(is_global.shape[1])[None, :]
    return ((i - j >= 0) & (i - j <= window))[None] | is_global[:, :, None] | is_global[:, None, :]


def lg_merged(is_global, window):
    anywhere = is_global.any(dim=0)
    merged = _near(is_global.shape[1], window) | anywhere[:, None] | anywhere[None, :]
    return merged.expand(is_global.shape[0], -1, -1).clone()


def lg_wrong_axis(is_global, window):
    return _near(is_global.shape[1], window) | is_global[:, None] | is_global[None, :]


def lg_as_int(is_global, window):
    return learner_local_global_mask(is_global, window).int()


def ta_one_where_allowed(mask, dtype):
    return torch.ones(mask.shape, dtype=dtype).masked_fill(~mask, NEG_INF)


def _later(document_ids, position, first):
    t = torch.arange(document_ids.shape[1])[None, :]
    return (document_ids == document_ids[:, position : position + 1]) & (t >= first)


def mb_row_not_column(document_ids, position):
    return learner_document_mask(document_ids)[:, position, :]


def mb_plain_causal(document_ids, position):
    return (torch.arange(document_ids.shape[1]) >= position)[None, :].expand(document_ids.shape).clone()


def mb_whole_document(document_ids, position):
    return document_ids == document_ids[:, position : position + 1]


def mb_after(document_ids, position):
    return _later(document_ids, position, position + 1)


def mb_from_one_before(document_ids, position):
    return _later(document_ids, position, position - 1)


def mb_only_itself(document_ids, position):
    return (torch.arange(document_ids.shape[1]) == position)[None, :].expand(document_ids.shape).clone()


def mb_other_rows(document_ids, position):
    return (document_ids == document_ids[:, position]) & (torch.arange(document_ids.shape[1])[None, :] >= position)


def mb_as_int(document_ids, position):
    return learner_moved_by(document_ids, position).int()


MUTANTS = [
    ("to_additive", ta_one_where_allowed, "allowed entries hold 1"),
    ("moved_by", mb_row_not_column, "the direction is reversed"),
    ("moved_by", mb_plain_causal, "the documents are ignored"),
    ("moved_by", mb_whole_document, "the causal part is ignored"),
    ("moved_by", mb_after, "the changed token itself is left out"),
    ("moved_by", mb_from_one_before, "the token just before the changed one"),
    ("moved_by", mb_only_itself, "only the changed token itself moves"),
    ("moved_by", mb_other_rows, "compared across the rows of the batch"),
    ("moved_by", mb_as_int, "dtype torch.int32, expected torch.bool"),
    ("to_additive", ta_inverted, "inverted"),
    ("to_additive", ta_minus_1e9, "hold -1e9 instead of -inf"),
    ("to_additive", ta_bert, "hold -10000 instead of -inf"),
    ("to_additive", ta_finfo_min, "most negative finite number"),
    ("to_additive", ta_as_floats, "0/1 numbers"),
    ("to_additive", ta_minus_one, "blocked entries hold -1"),
    ("to_additive", ta_plus_inf, "+inf instead of -inf"),
    ("to_additive", ta_times_inf, "0 * -inf is NaN"),
    ("to_additive", ta_float32, "always float32"),
    ("to_additive", ta_in_place, "modified its input `mask` in place"),
    ("to_additive", ta_bool, "still a boolean tensor"),
    ("document_mask", doc_inverted, "inverted"),
    ("document_mask", doc_sees_next, "the next key, j = i + 1"),
    ("document_mask", doc_not_itself, "may not attend to itself"),
    ("document_mask", doc_both_ways, "causal part is missing"),
    ("document_mask", doc_plain_causal, "documents are ignored"),
    ("document_mask", doc_upper, "triangle is the wrong one"),
    ("document_mask", doc_earlier_documents, "every earlier document"),
    ("document_mask", doc_rows_of_batch, "compares the rows of the batch with each other"),
    ("document_mask", doc_blocks_padding, "rows of padding tokens are all False"),
    ("document_mask", doc_additive, "dtype torch.float32, expected torch.bool"),
    ("prefix_lm_mask", plm_inverted, "inverted"),
    ("prefix_lm_mask", plm_prefix_on_queries, "applied to the queries"),
    ("prefix_lm_mask", plm_prefix_one_long, "one key too long"),
    ("prefix_lm_mask", plm_prefix_one_short, "one key too short"),
    ("prefix_lm_mask", plm_sees_next, "the next key, j = i + 1"),
    ("prefix_lm_mask", plm_not_itself, "may not see its own position"),
    ("prefix_lm_mask", plm_no_prefix, "the prefix is ignored"),
    ("prefix_lm_mask", plm_bidirectional, "causal part is missing"),
    ("prefix_lm_mask", plm_no_padding, "padding is not masked"),
    ("prefix_lm_mask", plm_pads_queries_too, "rows of padding queries are all False"),
    ("prefix_lm_mask", plm_lengths_swapped, "swapped"),
    ("prefix_lm_mask", plm_transposed, "query and key axes are swapped"),
    ("prefix_lm_mask", plm_as_float, "dtype torch.float32, expected torch.bool"),
    ("local_global_mask", lg_inverted, "inverted"),
    ("local_global_mask", lg_too_narrow, "one neighbour too narrow"),
    ("local_global_mask", lg_too_wide, "one neighbour too wide"),
    ("local_global_mask", lg_rows_only, "the global tokens only attend"),
    ("local_global_mask", lg_columns_only, "the global tokens are only attended to"),
    ("local_global_mask", lg_window_only, "the global tokens are ignored"),
    ("local_global_mask", lg_global_only, "the window is missing"),
    ("local_global_mask", lg_and, "combined with AND"),
    ("local_global_mask", lg_past_only, "covers only the past"),
    ("local_global_mask", lg_merged, "were merged"),
    ("local_global_mask", lg_wrong_axis, "broadcast over the wrong axis"),
    ("local_global_mask", lg_as_int, "dtype torch.int32, expected torch.bool"),
]


# blocked value one too high (1 where allowed, from `mask.to(dtype)`) and one too low (-1, not -inf); the causal
# diagonal shifted up and down; the end of the prefix one key too far and one too short; the window one neighbour
# too wide and too narrow
OFF_BY_ONE = {
    "document_mask": (doc_sees_next, doc_not_itself),
    "moved_by": (mb_after, mb_from_one_before),
    "local_global_mask": (lg_too_wide, lg_too_narrow),
    "to_additive": (ta_as_floats, ta_minus_one),
    "prefix_lm_mask": (plm_prefix_one_long, plm_prefix_one_short),
}


# --------------------------------------------------------------------------------------------
# Mistakes that show on one kind of test case only
# --------------------------------------------------------------------------------------------


def doc_one_hot_raw_ids(document_ids):
    """one_hot of the ids themselves: fine for ids 0, 1, 2, ...; padding's -1 makes it raise."""
    one_hot = F.one_hot(document_ids).float()
    return (one_hot @ one_hot.transpose(1, 2) > 0) & _tril(document_ids.shape[1])


def doc_shortcut_without_padding(document_ids):
    if bool((document_ids >= 0).all()):  # "no padding: one text per row" (but rows hold several documents)
        return doc_plain_causal(document_ids)
    return learner_document_mask(document_ids)


def doc_int8_positions(document_ids):
    positions = torch.arange(document_ids.shape[1]).to(torch.int8)  # wraps around after 127
    return _same(document_ids) & (positions[None, :] <= positions[:, None])


def lg_int8_positions(is_global, window):
    positions = torch.arange(is_global.shape[1]).to(torch.int8)
    near = (positions[:, None] - positions[None, :]).abs() <= window
    return near[None] | is_global[:, :, None] | is_global[:, None, :]


def ta_shortcut_without_padding(mask, dtype):
    if bool(mask.any(dim=-2).all()):  # every key is allowed somewhere: "no padding, nothing to block"
        return torch.zeros(mask.shape, dtype=dtype)
    return learner_to_additive(mask, dtype)


def ta_assumes_causal(mask, dtype):
    return torch.full(mask.shape, NEG_INF, dtype=dtype).triu(1)  # the mask itself is never read


def plm_shortcut_without_padding(prefix_lengths, lengths, max_len):
    if bool((lengths == max_len).all()):
        return learner_prefix_lm_mask(prefix_lengths, lengths, max_len).float()  # (but a mask is bool)
    return learner_prefix_lm_mask(prefix_lengths, lengths, max_len)


def plm_int8_positions(prefix_lengths, lengths, max_len):
    positions = torch.arange(max_len).to(torch.int8)
    causal = positions[None, :] <= positions[:, None]
    visible = causal[None] | (positions[None, None, :] < prefix_lengths[:, None, None])
    return visible & (positions[None, :] < lengths[:, None])[:, None, :]


def mb_padding_never_moves(document_ids, position):
    return learner_moved_by(document_ids, position) & (document_ids >= 0)  # "padding is not text": but it has outputs


def mb_shortcut_without_padding(document_ids, position):
    if bool((document_ids >= 0).all()):  # "no padding: one text per row" (but rows hold several documents)
        return mb_plain_causal(document_ids, position)
    return learner_moved_by(document_ids, position)


def mb_int8_positions(document_ids, position):
    positions = torch.arange(document_ids.shape[1]).to(torch.int8)  # wraps around after 127
    return (document_ids == document_ids[:, position : position + 1]) & (positions[None, :] >= position)


KIND_MUTANTS = [
    ("moved_by", mb_padding_never_moves, PADDED, "only at padding tokens"),
    ("moved_by", mb_shortcut_without_padding, UNPADDED, "except the ones with no padding"),
    ("moved_by", mb_int8_positions, LARGE, "large inputs"),
    *batch_of_one(CORRECT),
    ("to_additive", ta_shortcut_without_padding, UNPADDED, "expected -inf, got 0"),
    ("to_additive", ta_assumes_causal, PADDED, "differ"),
    ("document_mask", doc_one_hot_raw_ids, PADDED, "raised RuntimeError"),
    ("document_mask", doc_shortcut_without_padding, UNPADDED, "except the ones with no padding"),
    ("document_mask", doc_int8_positions, LARGE, "large inputs"),
    ("local_global_mask", lg_int8_positions, LARGE, "large inputs"),
    ("prefix_lm_mask", plm_shortcut_without_padding, UNPADDED, "dtype torch.float32"),
    ("prefix_lm_mask", plm_no_padding, PADDED, "padding is not masked"),
    ("prefix_lm_mask", plm_int8_positions, LARGE, "large inputs"),
]


KINDS_NOT_APPLICABLE = {
    ("to_additive", LARGE): "a conversion of booleans has no value that could overflow",
    ("local_global_mask", PADDED): "a global flag per token and no lengths: nothing is padding",
    ("local_global_mask", UNPADDED): "a global flag per token and no lengths: nothing is padding",
}


# --------------------------------------------------------------------------------------------
# The independent gallery: bugs written as a learner would, none copied from the mutants above or the checks' variants
# --------------------------------------------------------------------------------------------


def ta_where_big_negative(mask, dtype):
    return torch.where(mask, 0.0, -1e9).to(dtype)


def ta_not_times_inf(mask, dtype):
    return mask.logical_not().float() * float("-inf")


def ta_log_float32(mask, dtype):
    return torch.log(mask.float())


def ta_fill_where_true(mask, dtype):
    return torch.zeros_like(mask, dtype=dtype).masked_fill(mask, float("-inf"))


def ta_float32_min(mask, dtype):
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, torch.finfo(torch.float32).min)


def ta_ones_and_inf(mask, dtype):
    out = mask.to(dtype)
    out[out == 0] = float("-inf")
    return out


def ta_minus_one_times_inf(mask, dtype):
    return (mask.to(dtype) - 1) * float("inf")


def ta_inverted_bool(mask, dtype):
    return mask.logical_not()


def db_loop_next_token(document_ids):
    batch, length = document_ids.shape
    out = torch.zeros(batch, length, length, dtype=torch.bool)
    for b in range(batch):
        for q in range(length):
            for k in range(min(q + 2, length)):
                out[b, q, k] = document_ids[b, q].item() == document_ids[b, k].item()
    return out


def db_block_diagonal(document_ids):
    return document_ids.unsqueeze(2).eq(document_ids.unsqueeze(1))


def db_tril_repeat(document_ids):
    n = document_ids.size(1)
    return torch.tril(torch.ones(n, n)).bool().repeat(document_ids.size(0), 1, 1)


def db_unsqueeze_0_1(document_ids):
    same = document_ids.unsqueeze(0) == document_ids.unsqueeze(1)
    return same & torch.tril(torch.ones(document_ids.size(1), document_ids.size(1), dtype=torch.bool))


def db_loop_earlier_docs(document_ids):
    batch, length = document_ids.shape
    out = torch.zeros(batch, length, length, dtype=torch.bool)
    for b in range(batch):
        for q in range(length):
            for k in range(q + 1):
                out[b, q, k] = bool(document_ids[b, k] <= document_ids[b, q])
    return out


def db_float_product(document_ids):
    n = document_ids.size(1)
    same = (document_ids[:, :, None] == document_ids[:, None, :]).float()
    return same * torch.tril(torch.ones(n, n))


def db_real_only(document_ids):
    n = document_ids.size(1)
    real = (document_ids != -1).unsqueeze(-1)
    return (
        (document_ids.unsqueeze(-1) == document_ids.unsqueeze(1))
        & real
        & real.transpose(1, 2)
        & torch.ones(n, n, dtype=torch.bool).tril()
    )


def db_triu(document_ids):
    n = document_ids.size(1)
    return torch.triu(torch.ones(n, n, dtype=torch.bool)) & (document_ids[:, None, :] == document_ids[:, :, None])


def db_where_swapped(document_ids):
    n = document_ids.size(1)
    ok = (document_ids[:, :, None] == document_ids[:, None, :]) & torch.ones(n, n, dtype=torch.bool).tril()
    return torch.where(ok, False, True)


def db_boundaries_from_changes(document_ids):
    """Documents from where the id changes, counted with cumsum, but the change is marked one token late."""
    change = torch.zeros_like(document_ids)
    change[:, 2:] = (document_ids[:, 1:-1] != document_ids[:, :-2]).long()
    doc = change.cumsum(dim=1)
    n = document_ids.size(1)
    return (doc[:, :, None] == doc[:, None, :]) & torch.ones(n, n, dtype=torch.bool).tril()


def lgb_loop_strict(is_global, window):
    out = []
    for flags in is_global.tolist():
        n = len(flags)
        out.append([[abs(q - k) < window or flags[q] or flags[k] for k in range(n)] for q in range(n)])
    return torch.tensor(out)


def lgb_keys_only(is_global, window):
    n = is_global.size(1)
    band = torch.ones(n, n, dtype=torch.bool).triu(-window).tril(window)
    return band.unsqueeze(0) | is_global.unsqueeze(1)


def lgb_queries_only(is_global, window):
    n = is_global.size(1)
    band = torch.ones(n, n, dtype=torch.bool).triu(-window).tril(window)
    return band.unsqueeze(0) | is_global.unsqueeze(-1)


def lgb_logical_and(is_global, window):
    n = is_global.size(1)
    band = torch.ones(n, n, dtype=torch.bool).triu(-window).tril(window)
    return torch.logical_and(band.unsqueeze(0), is_global.unsqueeze(1) | is_global.unsqueeze(2))


def lgb_max_over_batch(is_global, window):
    n = is_global.size(1)
    flags = is_global.max(dim=0).values
    band = torch.ones(n, n, dtype=torch.bool).triu(-window).tril(window)
    return (band | flags.view(1, n) | flags.view(n, 1)).unsqueeze(0).repeat(is_global.size(0), 1, 1)


def lgb_causal_band(is_global, window):
    n = is_global.size(1)
    band = torch.ones(n, n, dtype=torch.bool).tril().triu(-window)
    return band.unsqueeze(0) | is_global.unsqueeze(1) | is_global.unsqueeze(2)


def lgb_globals_see_globals(is_global, window):
    n = is_global.size(1)
    band = torch.ones(n, n, dtype=torch.bool).triu(-window).tril(window)
    return band.unsqueeze(0) | (is_global.unsqueeze(1) & is_global.unsqueeze(2))


def lgb_half_window(is_global, window):
    n = is_global.size(1)
    half = window // 2
    band = torch.ones(n, n, dtype=torch.bool).triu(-half).tril(half)
    return band.unsqueeze(0) | is_global.unsqueeze(1) | is_global.unsqueeze(2)


def plm_loop_prefix_inclusive(prefix_lengths, lengths, max_len):
    mask = torch.zeros(len(lengths), max_len, max_len, dtype=torch.bool)
    for b in range(len(lengths)):
        n, p = int(lengths[b]), int(prefix_lengths[b])
        for i in range(max_len):
            for j in range(n):
                mask[b, i, j] = j <= i or j <= p
    return mask


def plm_blocks_without_padding(prefix_lengths, lengths, max_len):
    pos = torch.arange(max_len)
    prefix = pos[None, :] < prefix_lengths[:, None]
    return (prefix[:, :, None] & prefix[:, None, :]) | torch.tril(torch.ones(max_len, max_len, dtype=torch.bool))


def plm_loop_prefix_rows(prefix_lengths, lengths, max_len):
    mask = torch.zeros(len(lengths), max_len, max_len, dtype=torch.bool)
    for b in range(len(lengths)):
        n, p = int(lengths[b]), int(prefix_lengths[b])
        for i in range(max_len):
            if i < p:
                mask[b, i, :n] = True
            else:
                mask[b, i, : min(i + 1, n)] = True
    return mask


def plm_loop_causal_only(prefix_lengths, lengths, max_len):
    mask = torch.zeros(len(lengths), max_len, max_len, dtype=torch.bool)
    for b in range(len(lengths)):
        for i in range(max_len):
            mask[b, i, : min(i + 1, int(lengths[b]))] = True
    return mask


def plm_prefix_minus_one(prefix_lengths, lengths, max_len):
    j = torch.arange(max_len)
    causal = j[None, :] <= j[:, None]
    prefix = j[None, None, :] < (prefix_lengths - 1)[:, None, None]
    return (causal | prefix) & (j < lengths[:, None])[:, None, :]


def plm_padded_rows_empty(prefix_lengths, lengths, max_len):
    j = torch.arange(max_len)
    real = j[None, :] < lengths[:, None]
    visible = (j[None, :] <= j[:, None]) | (j[None, None, :] < prefix_lengths[:, None, None])
    return visible & real[:, None, :] & real[:, :, None]


def plm_float(prefix_lengths, lengths, max_len):
    j = torch.arange(max_len)
    visible = (j[None, :] <= j[:, None]).float() + (j[None, None, :] < prefix_lengths[:, None, None]).float()
    return visible.clamp(max=1) * (j[None, :] < lengths[:, None]).float()[:, None, :]


def plm_or_all(prefix_lengths, lengths, max_len):
    j = torch.arange(max_len)
    causal = torch.tril(torch.ones(max_len, max_len, dtype=torch.bool))
    prefix = j.view(1, 1, -1) < prefix_lengths.view(-1, 1, 1)
    real = j.view(1, 1, -1) < lengths.view(-1, 1, 1)
    return causal | prefix | real


def mbb_loop_strictly_later(document_ids, position):
    moved = torch.zeros_like(document_ids, dtype=torch.bool)
    for b in range(document_ids.shape[0]):
        for t in range(document_ids.shape[1]):
            moved[b, t] = bool(document_ids[b, t] == document_ids[b, position]) and t > position
    return moved


def mbb_keys_it_sees(document_ids, position):
    t = torch.arange(document_ids.shape[1])
    return (document_ids[:, position][:, None] == document_ids) & (t <= position)[None, :]


def mbb_everything_after(document_ids, position):
    return torch.arange(document_ids.shape[1]).expand_as(document_ids) >= position


def mbb_same_id(document_ids, position):
    return document_ids.eq(document_ids[:, [position]])


def mbb_one_hot(document_ids, position):
    return F.one_hot(torch.tensor(position), document_ids.shape[1]).bool().expand_as(document_ids)


def mbb_next_two_only(document_ids, position):
    t = torch.arange(document_ids.shape[1])[None, :]
    return (document_ids == document_ids[:, position : position + 1]) & (t >= position) & (t <= position + 2)


def mbb_as_float(document_ids, position):
    return learner_moved_by_loop(document_ids, position).float()


BUGS = [
    ("moved_by", mbb_loop_strictly_later, "the changed token itself is left out"),
    ("moved_by", mbb_keys_it_sees, "the direction is reversed"),
    ("moved_by", mbb_everything_after, "the documents are ignored"),
    ("moved_by", mbb_same_id, "the causal part is ignored"),
    ("moved_by", mbb_one_hot, "only the changed token itself moves"),
    ("moved_by", mbb_next_two_only, GENERIC),
    ("moved_by", mbb_as_float, "dtype torch.float32, expected torch.bool"),
    ("document_mask", db_loop_next_token, "the next key, j = i + 1"),
    ("document_mask", db_block_diagonal, "causal part is missing"),
    ("document_mask", db_tril_repeat, "documents are ignored"),
    ("document_mask", db_unsqueeze_0_1, "compares the rows of the batch with each other"),
    ("document_mask", db_loop_earlier_docs, "every earlier document"),
    ("document_mask", db_float_product, "dtype torch.float32, expected torch.bool"),
    ("document_mask", db_real_only, "rows of padding tokens are all False"),
    ("document_mask", db_triu, "triangle is the wrong one"),
    ("document_mask", db_where_swapped, "inverted"),
    ("document_mask", db_boundaries_from_changes, GENERIC),
    ("local_global_mask", lgb_loop_strict, "one neighbour too narrow"),
    ("local_global_mask", lgb_keys_only, "the global tokens are only attended to"),
    ("local_global_mask", lgb_queries_only, "the global tokens only attend"),
    ("local_global_mask", lgb_logical_and, "combined with AND"),
    ("local_global_mask", lgb_max_over_batch, "were merged"),
    ("local_global_mask", lgb_causal_band, "covers only the past"),
    ("local_global_mask", lgb_globals_see_globals, GENERIC),
    ("local_global_mask", lgb_half_window, GENERIC),
    ("to_additive", ta_where_big_negative, "hold -1e9 instead of -inf"),
    ("to_additive", ta_not_times_inf, "NaN"),
    ("to_additive", ta_log_float32, "always float32"),
    ("to_additive", ta_fill_where_true, "inverted"),
    ("to_additive", ta_float32_min, GENERIC),
    ("to_additive", ta_ones_and_inf, "allowed entries hold 1"),
    ("to_additive", ta_minus_one_times_inf, "0 * -inf is NaN"),
    ("to_additive", ta_inverted_bool, "still a boolean tensor"),
    ("prefix_lm_mask", plm_loop_prefix_inclusive, "one key too long"),
    ("prefix_lm_mask", plm_blocks_without_padding, "padding is not masked"),
    ("prefix_lm_mask", plm_loop_prefix_rows, "applied to the queries"),
    ("prefix_lm_mask", plm_loop_causal_only, "the prefix is ignored"),
    ("prefix_lm_mask", plm_prefix_minus_one, "one key too short"),
    ("prefix_lm_mask", plm_padded_rows_empty, "rows of padding queries are all False"),
    ("prefix_lm_mask", plm_float, "dtype torch.float32"),
    ("prefix_lm_mask", plm_or_all, "combined with OR"),
]
