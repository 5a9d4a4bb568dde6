"""Lesson 06, 06_masking: the galleries of ``causal_padding_mask``, ``to_additive`` and ``prefix_lm_mask``
(CORRECT, MUTANTS, OFF_BY_ONE, KIND_MUTANTS, KINDS_NOT_APPLICABLE, BUGS, as tests/galleries/__init__.py
describes them).

``to_additive`` converts booleans, which have no value that could overflow: no mistake shows on large inputs
only (KINDS_NOT_APPLICABLE), though the exercise still has large test cases.
"""

from __future__ import annotations

import torch

from attnedu.checks.exercise import LARGE, PADDED, UNPADDED
from attnedu.masks import causal_padding_mask, to_additive

from .common import GENERIC, NEG_INF, batch_of_one

# --------------------------------------------------------------------------------------------
# Correct versions, written as a learner would
# --------------------------------------------------------------------------------------------


def learner_causal_padding_mask(lengths, max_len):
    causal = torch.ones(max_len, max_len, dtype=torch.bool).tril()
    padding = torch.arange(max_len)[None, :] < lengths[:, None]
    return causal[None, :, :] & padding[:, None, :]


def learner_causal_padding_mask_loop(lengths, max_len):
    mask = torch.zeros(len(lengths), max_len, max_len, dtype=torch.bool)
    for b, n in enumerate(lengths.tolist()):
        for i in range(max_len):
            mask[b, i, : min(i + 1, n)] = True
    return mask


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


CORRECT = {
    "causal_padding_mask": [learner_causal_padding_mask, learner_causal_padding_mask_loop, causal_padding_mask],
    "to_additive": [learner_to_additive, learner_to_additive_where, learner_to_additive_log, to_additive],
    "prefix_lm_mask": [learner_prefix_lm_mask, learner_prefix_lm_mask_blocks],
}


# --------------------------------------------------------------------------------------------
# The mutant gallery: (exercise, mutant, a substring of the expected diagnosis)
# --------------------------------------------------------------------------------------------


def _padding(lengths, max_len):
    return torch.arange(max_len)[None, :] < lengths[:, None]


# causal_padding_mask
def cpm_inverted(lengths, max_len):
    return ~learner_causal_padding_mask(lengths, max_len)


def cpm_sees_next(lengths, max_len):
    causal = torch.ones(max_len, max_len, dtype=torch.bool).tril(1)
    return causal[None] & _padding(lengths, max_len)[:, None, :]


def cpm_not_itself(lengths, max_len):
    causal = torch.ones(max_len, max_len, dtype=torch.bool).tril(-1)
    return causal[None] & _padding(lengths, max_len)[:, None, :]


def cpm_upper_triangle(lengths, max_len):
    causal = torch.ones(max_len, max_len, dtype=torch.bool).triu()
    return causal[None] & _padding(lengths, max_len)[:, None, :]


def cpm_no_padding(lengths, max_len):
    return torch.ones(max_len, max_len, dtype=torch.bool).tril().repeat(len(lengths), 1, 1)


def cpm_no_causal(lengths, max_len):
    return _padding(lengths, max_len)[:, None, :].repeat(1, max_len, 1)


def cpm_or(lengths, max_len):
    return torch.ones(max_len, max_len, dtype=torch.bool).tril()[None] | _padding(lengths, max_len)[:, None, :]


def cpm_pads_queries(lengths, max_len):
    return torch.ones(max_len, max_len, dtype=torch.bool).tril()[None] & _padding(lengths, max_len)[:, :, None]


def cpm_pads_both(lengths, max_len):
    pad = _padding(lengths, max_len)
    return learner_causal_padding_mask(lengths, max_len) & pad[:, :, None]


def cpm_transposed(lengths, max_len):
    return learner_causal_padding_mask(lengths, max_len).transpose(-1, -2)


def cpm_padding_one_long(lengths, max_len):
    return learner_causal_padding_mask(lengths + 1, max_len)


def cpm_padding_one_short(lengths, max_len):
    return learner_causal_padding_mask(lengths - 1, max_len)


def cpm_longest(lengths, max_len):
    return learner_causal_padding_mask(lengths, int(lengths.max()))


def cpm_as_int(lengths, max_len):
    return learner_causal_padding_mask(lengths, max_len).long()


def cpm_two_dims(lengths, max_len):
    return torch.ones(max_len, max_len, dtype=torch.bool).tril() & _padding(lengths, max_len)


# to_additive
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


MUTANTS = [
    ("causal_padding_mask", cpm_inverted, "inverted"),
    ("causal_padding_mask", cpm_sees_next, "the next key, j = i + 1"),
    ("causal_padding_mask", cpm_not_itself, "may not attend to its own position"),
    ("causal_padding_mask", cpm_upper_triangle, "triangle is the wrong one"),
    ("causal_padding_mask", cpm_no_padding, "padding is not masked"),
    ("causal_padding_mask", cpm_no_causal, "causal part is missing"),
    ("causal_padding_mask", cpm_or, "combined with OR"),
    ("causal_padding_mask", cpm_pads_queries, "rows of padding queries are all False"),
    ("causal_padding_mask", cpm_pads_both, "rows of padding queries are all False"),
    ("causal_padding_mask", cpm_transposed, "query and key axes are swapped"),
    ("causal_padding_mask", cpm_padding_one_long, "one key too many"),
    ("causal_padding_mask", cpm_padding_one_short, "last real word"),
    ("causal_padding_mask", cpm_longest, "not max_len"),
    ("causal_padding_mask", cpm_as_int, "dtype torch.int64, expected torch.bool"),
    ("causal_padding_mask", cpm_two_dims, "raised RuntimeError"),
    ("to_additive", ta_inverted, "inverted"),
    ("to_additive", ta_minus_1e9, "hold -1e9 instead of -inf"),
    ("to_additive", ta_bert, "hold -10000 instead of -inf"),
    ("to_additive", ta_finfo_min, "torch.finfo(dtype).min"),
    ("to_additive", ta_as_floats, "0/1 numbers"),
    ("to_additive", ta_minus_one, "blocked entries hold -1"),
    ("to_additive", ta_plus_inf, "+inf instead of -inf"),
    ("to_additive", ta_times_inf, "0 * -inf is NaN"),
    ("to_additive", ta_float32, "always float32"),
    ("to_additive", ta_in_place, "modified its input `mask` in place"),
    ("to_additive", ta_bool, "still a boolean tensor"),
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
]


# causal diagonal shifted up and down; blocked value one too high (1 where allowed, from `mask.to(dtype)`) and one
# too low (-1, not -inf); the end of the prefix one key too far and one too short
OFF_BY_ONE = {
    "causal_padding_mask": (cpm_sees_next, cpm_not_itself),
    "to_additive": (ta_as_floats, ta_minus_one),
    "prefix_lm_mask": (plm_prefix_one_long, plm_prefix_one_short),
}


# --------------------------------------------------------------------------------------------
# Mistakes that show on one kind of test case only
# --------------------------------------------------------------------------------------------


def cpm_shortcut_without_padding(lengths, max_len):
    if bool((lengths == max_len).all()):
        return torch.ones(max_len, max_len, dtype=torch.bool).tril()  # nothing is padded (but the batch axis?)
    return learner_causal_padding_mask(lengths, max_len)


def cpm_int8_positions(lengths, max_len):
    positions = torch.arange(max_len).to(torch.int8)  # wraps around after 127
    causal = positions[None, :] <= positions[:, None]
    return causal[None] & (positions[None, :] < lengths[:, None])[:, None, :]


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


KIND_MUTANTS = [
    *batch_of_one(CORRECT),
    ("causal_padding_mask", cpm_shortcut_without_padding, UNPADDED, "no padding"),
    ("causal_padding_mask", cpm_no_padding, PADDED, "padding is not masked"),
    ("causal_padding_mask", cpm_int8_positions, LARGE, "large inputs"),
    ("to_additive", ta_shortcut_without_padding, UNPADDED, "expected -inf, got 0"),
    ("to_additive", ta_assumes_causal, PADDED, "differ"),
    ("prefix_lm_mask", plm_shortcut_without_padding, UNPADDED, "dtype torch.float32"),
    ("prefix_lm_mask", plm_no_padding, PADDED, "padding is not masked"),
    ("prefix_lm_mask", plm_int8_positions, LARGE, "large inputs"),
]


KINDS_NOT_APPLICABLE = {
    ("to_additive", LARGE): "a conversion of booleans has no value that could overflow",
}


# --------------------------------------------------------------------------------------------
# The independent gallery: bugs written as a learner would, none copied from the mutants above or the checks' variants
# --------------------------------------------------------------------------------------------


def cpm_loop_one_ahead(lengths, max_len):
    mask = torch.zeros(lengths.shape[0], max_len, max_len, dtype=torch.bool)
    for b in range(lengths.shape[0]):
        n = int(lengths[b])
        for i in range(max_len):
            mask[b, i, : min(i + 2, n)] = True
    return mask


def cpm_strict_upper(lengths, max_len):
    allowed = torch.triu(torch.ones(max_len, max_len, dtype=torch.bool), diagonal=1)
    keys = torch.arange(max_len).unsqueeze(0) < lengths.unsqueeze(1)
    return allowed.unsqueeze(0) & keys.unsqueeze(1)


def cpm_outer_padding(lengths, max_len):
    real = torch.arange(max_len).expand(len(lengths), max_len) < lengths.view(-1, 1)
    pairs = real.unsqueeze(2) & real.unsqueeze(1)
    return pairs & torch.tril(torch.ones(max_len, max_len)).bool()


def cpm_float_product(lengths, max_len):
    keys = (torch.arange(max_len)[None, :] < lengths[:, None]).float()
    return torch.tril(torch.ones(max_len, max_len)) * keys[:, None, :]


def cpm_longest_sentence(lengths, max_len):
    n = int(lengths.max())
    tri = torch.ones(n, n).tril().bool()
    return tri[None] & (torch.arange(n)[None, :] < lengths[:, None])[:, None]


def cpm_forgets_query_axis(lengths, max_len):
    keys = torch.arange(max_len)[None, :] < lengths[:, None]
    return torch.ones(max_len, max_len, dtype=torch.bool).tril() & keys


def cpm_length_inclusive(lengths, max_len):
    keys = torch.arange(max_len).view(1, 1, -1) <= lengths.view(-1, 1, 1)
    return torch.tril(torch.ones(max_len, max_len, dtype=torch.bool)).unsqueeze(0) & keys


def cpm_ge(lengths, max_len):
    i = torch.arange(max_len).view(-1, 1)
    j = torch.arange(max_len).view(1, -1)
    return (j >= i).unsqueeze(0) & (j < lengths.view(-1, 1, 1))


def cpm_loop_transposed(lengths, max_len):
    mask = torch.zeros(len(lengths), max_len, max_len, dtype=torch.bool)
    for b, n in enumerate(lengths.tolist()):
        for i in range(max_len):
            mask[b, : min(i + 1, n), i] = True
    return mask


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


BUGS = [
    ("causal_padding_mask", cpm_loop_one_ahead, "the next key, j = i + 1"),
    ("causal_padding_mask", cpm_strict_upper, GENERIC),
    ("causal_padding_mask", cpm_outer_padding, "rows of padding queries are all False"),
    ("causal_padding_mask", cpm_float_product, "dtype torch.float32, expected torch.bool"),
    ("causal_padding_mask", cpm_longest_sentence, "not max_len"),
    ("causal_padding_mask", cpm_forgets_query_axis, "raised RuntimeError"),
    ("causal_padding_mask", cpm_length_inclusive, "one key too many"),
    ("causal_padding_mask", cpm_ge, "triangle is the wrong one"),
    ("causal_padding_mask", cpm_loop_transposed, "query and key axes are swapped"),
    ("to_additive", ta_where_big_negative, "hold -1e9 instead of -inf"),
    ("to_additive", ta_not_times_inf, "NaN"),
    ("to_additive", ta_log_float32, "always float32"),
    ("to_additive", ta_fill_where_true, "inverted"),
    ("to_additive", ta_float32_min, GENERIC),
    ("to_additive", ta_ones_and_inf, GENERIC),
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
